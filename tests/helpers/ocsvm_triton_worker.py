"""Fit ``OneClassSVM(loop="triton")`` (or the Triton loop a case's kwargs name) on the cases of a
JSON file and write what it returns (not a test file: ``tests/negatives/ocsvm/test_ocsvm_triton.py``
runs it in a subprocess).

    TRITON_INTERPRET=1 python tests/helpers/ocsvm_triton_worker.py CASES.json OUT.pt

Without a CUDA device the Triton program runs in Triton's interpreter on CPU tensors, which must
be chosen before triton is imported: hence a fresh process with TRITON_INTERPRET=1. With one, the
compiled kernel runs on the GPU. Each case is a dict with ``X`` and ``Y`` (nested lists or a
``fakedata.embeddings`` recipe) and the OneClassSVM keyword arguments; the output per case is the
dense alpha, rho, decision values on Y, the n_iter/status, the sync count and the non-finite flag,
read only after the fit and scoring, the loop that ran (``path_``) and the fit's warnings. A case
with ``q``, ``k``, ``queue`` runs MiOC's step instead (:func:`mioc_case`), one with ``kernels`` the
Gram and scoring kernels alone (:func:`kernels_case`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from negatives.base import Step  # noqa: E402
from negatives.mioc import MiOC  # noqa: E402
from negatives.ocsvm.svm import OneClassSVM  # noqa: E402
from negmine_core.contract.sync_counter import SyncCounter  # noqa: E402
from pretrain.testing.fakedata import embeddings  # noqa: E402


def data(case: dict) -> tuple[torch.Tensor, torch.Tensor]:
    if "recipe" in case:
        return embeddings(**case["recipe"])
    return torch.tensor(case["X"]), torch.tensor(case["Y"])


def mioc_case(case: dict, dev: str) -> dict:
    """MiOC's OC-SVM step on its device path: the inlier mask, then ``negatives`` under the sync
    counter (a fresh MiOC per policy)."""
    q, k, queue = (torch.tensor(case[name], device=dev) for name in ("q", "k", "queue"))
    out: dict = {}
    for policy in ("queue", "skip"):
        mioc = MiOC(**case["kwargs"], empty_inliers=policy)
        mioc.svm.loop = "triton"
        mioc.to(dev)
        mask = mioc.fit_inliers(torch.cat([q, k]), queue)
        with SyncCounter() as syncs:
            extra = mioc.negatives(
                Step.single(
                    q=q,
                    k=k,
                    queue=queue,
                    queue_labels=torch.full((len(queue),), -1, device=dev),
                    epoch=5.0,
                )
            )
        d = mioc.diagnostics()
        out[policy] = {
            "mask": mask.cpu(),
            "shared": tuple(extra.shared.shape),
            "syncs": syncs.report() if syncs.count else "",
            "count": syncs.count,
            "inliers": float(d["inliers"]),
            "empty_steps": int(d["empty_inlier_steps"]),
            "finite_output": bool(torch.isfinite(extra.shared).all()),
            "bad_input": mioc.bad_input(),
        }
    return out


def kernel_inputs(case: dict) -> dict[str, torch.Tensor]:
    """The inputs of a ``kernels`` case, rebuilt identically by the test for its reference: X
    (n, d) float64 N(0, 1/d) with ``nan_rows`` set to NaN / inf, Y (m, d) in ``dtype`` (strided
    along d if ``strided``), a dense dual with nonzero coefficients at ``support`` only, and rho
    = the median decision value before rho (half the rows inliers)."""
    n, d, m = case["n"], case["d"], case["m"]
    g = torch.Generator().manual_seed(case["seed"])
    X = torch.randn(n, d, generator=g, dtype=torch.float64) / d**0.5
    for r, v in zip(case.get("nan_rows", []), (float("nan"), float("inf"), -float("inf"))):
        X[r, r % d] = v
    Y = torch.randn(m, 2 * d if case.get("strided") else d, generator=g, dtype=torch.float64)
    Y = (Y / d**0.5).to(getattr(torch, case["dtype"]))
    Y = Y[:, ::2] if case.get("strided") else Y
    coef = torch.zeros(n, dtype=torch.float64)
    coef[case["support"]] = torch.rand(len(case["support"]), generator=g, dtype=torch.float64)
    k = torch.exp(-case["gamma"] * torch.cdist(X, Y.double()).square())  # (n, m)
    rho = (coef @ k).nanmedian().reshape(1)  # about half the rows of Y are inliers
    return {"X": X, "Y": Y, "coef": coef, "rho": rho}


def kernels_case(case: dict, dev: str) -> dict:
    """``ocsvm_kernels_triton``'s two ops on :func:`kernel_inputs`, under the op counter."""
    from negatives.ocsvm import kernels_triton as kt
    from negmine_core.contract.op_counter import OpCounter

    scale, kt.INTERPRET_SCALE = kt.INTERPRET_SCALE, 1  # the GPU's tiles, several per input (the
    # cases are small); put back after, or the fits after it run on the GPU's tiles, interpreted
    t = {k: v.to(dev) for k, v in kernel_inputs(case).items()}
    gamma = torch.tensor([case["gamma"]], dtype=torch.float64, device=dev)
    try:
        with OpCounter() as ops, SyncCounter() as syncs:
            Q, sq, bad = kt.gram(t["X"], gamma, case.get("linear", False))
            f, mask = kt.score(t["Y"], t["X"], sq, t["coef"], t["rho"], gamma)
    finally:
        kt.INTERPRET_SCALE = scale
    out = {"Q": Q, "sq": sq, "bad": bad, "f": f, "mask": mask}
    return {k: v.cpu() for k, v in out.items()} | {"ops": ops.count, "syncs": syncs.count}


def main(cases_path: Path, out: Path) -> None:
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    results = []
    for case in json.loads(cases_path.read_text()):
        if "q" in case:
            results.append(mioc_case(case, dev))
            continue
        if "kernels" in case:
            results.append(kernels_case(case["kernels"], dev))
            continue
        X, Y = data(case)
        svm = OneClassSVM(**({"loop": "triton"} | case["kwargs"]))
        with warnings.catch_warnings(record=True) as fit_caught:
            warnings.simplefilter("always")
            svm.fit(X.to(dev))
        f = svm.decision_function(Y.to(dev))
        stats = {k: float(v) for k, v in svm.fit_stats().items()}
        res = {
            "alpha": svm._coef.cpu(),
            "rho": svm.offset_.cpu(),
            "intercept": svm.intercept_.cpu(),
        }
        res.update(f=f.cpu(), stats=stats, n_syncs=svm.n_syncs_, nonfinite=bool(svm.nonfinite_))
        res.update(path=svm.path_, fit_warnings=[str(w.message) for w in fit_caught])
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


def run(cases: list[dict], tmp: Path) -> list[dict]:
    """Run ``cases`` in a fresh process (Triton's interpreter without a GPU); the results."""
    root = Path(__file__).resolve().parents[2]
    (tmp / "cases.json").write_text(json.dumps(cases))
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    cmd = [sys.executable, __file__, str(tmp / "cases.json"), str(tmp / "out.pt")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(tmp / "out.pt", weights_only=False)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
