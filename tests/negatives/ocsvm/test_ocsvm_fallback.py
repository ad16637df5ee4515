"""The Triton OC-SVM falls back to the device loop where it cannot run: never a crash.

At its first Triton fit, a triton older than ``TRITON_MIN`` or a kernel that fails to compile or
launch makes ``OneClassSVM`` fit with the device loop (the same iterates as scikit-learn) with one
warning naming the cause and the setting that chooses the loop; the scoring kernel falls back to
batched tensor ops likewise; MiOC's metrics record the loop that ran. The failures: a kernel
launch made to raise, a patched version number, and (in a training run in a fresh process) the
real refusal of CPU tensors by the Triton path outside Triton's interpreter.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from sklearn.svm import OneClassSVM as SkOneClassSVM

from negatives.ocsvm import device_support
from negatives.ocsvm.svm import OneClassSVM
from tests.helpers.paths import ROOT

NO_TRITON = "triton is not installed: the Triton kernels' tests need it (pip install triton)"


def data(n: int = 120, d: int = 5, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).normal(size=(n, d)))


def assert_matches_sklearn(svm: OneClassSVM, X: torch.Tensor) -> None:
    ref = SkOneClassSVM(nu=0.2, gamma=0.3).fit(X.numpy())
    assert svm.n_iter_ == ref.n_iter_
    np.testing.assert_array_equal(svm.support_.numpy(), ref.support_)
    np.testing.assert_allclose(svm.dual_coef_.numpy(), ref.dual_coef_, atol=1e-10)
    np.testing.assert_allclose(svm.offset_.numpy(), ref.offset_, atol=1e-10)


@pytest.mark.parametrize("loop", ["triton", "triton_regs"])
def test_a_kernel_that_cannot_launch_falls_back_to_the_device_loop_with_one_warning(
    monkeypatch, loop
):
    pytest.importorskip("triton", reason=NO_TRITON)
    from negatives.ocsvm import kernels_triton

    def fails(*args, **kwargs):
        raise RuntimeError("PTX .version 9.9 does not support .target sm_90\n(ptxas output)")

    monkeypatch.setattr(kernels_triton, "gram", fails)
    X = data()
    svm = OneClassSVM(loop=loop, nu=0.2, gamma=0.3)
    with pytest.warns(RuntimeWarning) as caught:
        svm.fit(X)
    (warning,) = [w for w in caught if "Triton OC-SVM" in str(w.message)]
    text = str(warning.message)
    assert "(RuntimeError: PTX .version 9.9 does not support .target sm_90)" in text  # the cause
    assert "negatives.kwargs.loop" in text and "OneClassSVM(loop=...)" in text  # the setting
    assert svm.path_ == "device"
    assert_matches_sklearn(svm, X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warning came once: the next fits are quiet
        svm.fit(X)
    assert svm.path_ == "device"
    assert_matches_sklearn(svm, X)


SCORE_FAILS = """
import json, sys, warnings
import numpy as np, torch
from negatives.ocsvm import kernels_triton
from negatives.ocsvm.svm import OneClassSVM
X = torch.from_numpy(np.random.default_rng(0).normal(size=(64, 5)))
Y = torch.from_numpy(np.random.default_rng(1).normal(size=(50, 5)))
svm = OneClassSVM(loop="triton", nu=0.2, gamma=0.3).fit(X)  # Triton's interpreter
def fails(*args, **kwargs):
    raise RuntimeError("out of resource: shared memory")
kernels_triton.score = fails
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    f, mask = svm.score(Y)
    f2 = svm.decision_function(Y)
json.dump({"path": svm.path_, "f": f.tolist(), "mask": mask.tolist(), "f2": f2.tolist(),
           "warnings": [str(w.message) for w in caught]}, sys.stdout)
"""


def test_a_scoring_kernel_that_cannot_launch_falls_back_to_batched_ops():
    """The fit ran (in Triton's interpreter, a fresh process); the first scoring launch fails:
    one warning, and the decision values of the batched path (scikit-learn's)."""
    pytest.importorskip("triton", reason=NO_TRITON)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", SCORE_FAILS], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout)
    assert got["path"] == "triton"
    (warning,) = got["warnings"]
    assert (
        "scoring kernel cannot run here (RuntimeError: out of resource: shared memory)" in warning
    )
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(64, 5)), np.random.default_rng(1).normal(size=(50, 5))
    want = SkOneClassSVM(nu=0.2, gamma=0.3).fit(X).decision_function(Y)
    np.testing.assert_allclose(got["f"], want, atol=1e-9)
    np.testing.assert_allclose(got["f2"], want, atol=1e-9)
    assert got["mask"] == (want > 0).tolist()


@pytest.mark.parametrize(
    "version,usable",
    [("3.4.1", False), ("3.5.0", True), ("3.8.0+git1a2b3c", True), ("2.3.1", False)],
)
def test_triton_older_than_the_kernels_need_is_named(monkeypatch, version, usable):
    pytest.importorskip("triton", reason=NO_TRITON)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: version)
    cause = device_support.triton_unusable()
    assert (cause == "") == usable, cause
    if not usable:
        assert cause == f"triton {version} is older than 3.5, the oldest the kernels run on"
        X = data(seed=1)
        with pytest.warns(RuntimeWarning, match=f"cannot run here \\({cause}\\)"):
            svm = OneClassSVM(loop="triton", nu=0.2, gamma=0.3).fit(X)
        assert svm.path_ == "device"
        assert_matches_sklearn(svm, X)


def test_user_errors_still_raise_on_the_triton_path():
    """A bad input is the caller's error, not the backend's: no fallback hides it."""
    with pytest.raises(ValueError, match="every alpha is at its bound"):
        OneClassSVM(loop="triton", nu=1.0).fit(data(n=10))


def test_mioc_run_records_the_loop_that_ran(tmp_path):
    """A MiOC training run with ``loop: triton`` on a CPU without the interpreter trains to the
    end on the device loop, warns once, and logs ``neg_ocsvm_path``."""
    pytest.importorskip("triton", reason=NO_TRITON)
    cmd = [sys.executable, "-m", "pretrain", "--cfg", "digits_mioc.yaml", f"out_dir={tmp_path}",
           "model.width=8", "model.bn_splits=2", "train.batch_size=32", "moco.queue_size=64",
           "train.progress_bar=false", "train.log_every=2", "eval.knn_every=0",
           "train.max_steps=4", "negatives.kwargs.warmup_epochs=0",
           "negatives.kwargs.num_synthetic=8", "negatives.kwargs.num_inlier_synthetic=4",
           "negatives.kwargs.loop=triton"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["OMP_NUM_THREADS"] = "1"
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stderr.count("the Triton OC-SVM cannot run here") == 1, run.stderr[-3000:]
    steps = [json.loads(s) for s in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    paths = {r["neg_ocsvm_path"] for r in steps if r["kind"] == "step"}
    assert paths == {"device"}


def test_the_cpu_default_is_the_host_loop():
    svm = OneClassSVM(nu=0.2, gamma=0.3).fit(data())
    assert svm.path_ == "host"
    assert torch.equal(
        OneClassSVM(nu=0.2, gamma=0.3, backend="sklearn").fit(data()).support_, svm.support_
    )
