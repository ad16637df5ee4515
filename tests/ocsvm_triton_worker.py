"""Fit ``OneClassSVM(loop="triton")`` on the cases of a JSON file and write what it returns
(not a test file: ``tests/test_ocsvm_triton.py`` runs it in a subprocess).

    TRITON_INTERPRET=1 python tests/ocsvm_triton_worker.py CASES.json OUT.pt

Without a CUDA device the Triton program runs in Triton's interpreter on CPU tensors, which must
be chosen before triton is imported: hence a fresh process with TRITON_INTERPRET=1. With one, the
compiled kernel runs on the GPU. Each case is a dict with ``X`` and ``Y`` (nested lists or a
``fakedata.embeddings`` recipe) and the OneClassSVM keyword arguments; the output per case is the
dense alpha, rho, decision values on Y, the n_iter/status, the sync count and the non-finite flag,
read only after the fit and scoring.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fakedata import embeddings  # noqa: E402

from negatives.ocsvm import OneClassSVM  # noqa: E402


def data(case: dict) -> tuple[torch.Tensor, torch.Tensor]:
    if "recipe" in case:
        return embeddings(**case["recipe"])
    return torch.tensor(case["X"]), torch.tensor(case["Y"])


def main(cases_path: Path, out: Path) -> None:
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    results = []
    for case in json.loads(cases_path.read_text()):
        X, Y = data(case)
        svm = OneClassSVM(loop="triton", **case["kwargs"])
        svm.fit(X.to(dev))
        f = svm.decision_function(Y.to(dev))
        stats = {k: float(v) for k, v in svm.fit_stats().items()}
        res = {
            "alpha": svm._coef.cpu(),
            "rho": svm.offset_.cpu(),
            "intercept": svm.intercept_.cpu(),
        }
        res.update(f=f.cpu(), stats=stats, n_syncs=svm.n_syncs_, nonfinite=bool(svm.nonfinite_))
        res.update(predict=svm.predict(Y.to(dev)).cpu())
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                res.update(n_iter=svm.n_iter_, status=svm.fit_status_, support=svm.support_.cpu())
            res["warnings"] = [str(w.message) for w in caught]
        except ValueError as e:
            res["error"] = str(e)
        results.append(res)
    torch.save(results, out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
