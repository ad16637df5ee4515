"""Every Triton kernel through Triton's real launch path, without a GPU, on each supported triton.

``tests/helpers/triton_launch_worker.py`` runs the public entry points
(``OneClassSVM(loop="triton")``'s fit, decision_function and score; ``SplitBatchNorm`` on the triton
path, forward and backward) with a stand-in active driver (``tests/helpers/triton_standin.py``) that
reports an sm_90 GPU: the generated argument binder, the launch options, the sm_90 compile, the
globals check and the H100's resource limits all run as on a GPU; the launch itself is recorded, not
run (the interpreted tests check the results). The three failures an H200 found (a kernel argument
named ``params``, a NaN constexpr global, float64 ``tl.dot`` on triton <= 3.7) each fail this test.

The installed triton runs always. Older ones run from folders named in ``NEGMINE_TRITON_OLDER``
(``:``-separated ``pip install --target`` folders; ``.ci/run`` installs triton 3.5.1 and 3.6.0);
under CI (``CI=true``) a missing folder is an error, not a skip. The workers run once per session
(``tests/helpers/triton_launches.py``, the ``triton_launches`` fixture of ``tests/conftest.py``):
the sm_90 PTX tests of the OC-SVM and split BN read the installed triton's compiles from the same
run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from negatives.ocsvm.device_support import TRITON_MIN
from tests.helpers.triton_launches import OLDER

pytest.importorskip("triton", reason="triton comes with torch's CUDA wheels; not installed")

SPLIT_BN = ["_stats_kernel", "_normalize_kernel", "_grad_stats_kernel", "_grad_input_kernel"]
SPLIT_BN_ONEPASS = ["_split_bn_forward_kernel", "_split_bn_backward_kernel"]


@pytest.fixture(params=["installed", *OLDER])
def launched(request, triton_launches):
    got = triton_launches[None if request.param == "installed" else request.param]
    assert isinstance(got, dict), got  # else the worker's error output
    return got


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def test_older_tritons_are_checked_in_ci():
    """CI checks the oldest supported triton (TRITON_MIN) as well as the installed one."""
    if not OLDER:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must set NEGMINE_TRITON_OLDER (see .ci/run)")
        pytest.skip("NEGMINE_TRITON_OLDER is not set: only the installed triton is launched")
    versions = []
    for site in OLDER:
        dist = [p.name for p in Path(site).glob("triton-*.dist-info")]
        assert dist, f"{site}: no triton dist-info"
        versions.append(tuple(int(x) for x in dist[0].split("-")[1].split(".")[:2]))
    assert min(versions) == TRITON_MIN, (versions, TRITON_MIN)


def test_every_launch_binds_compiles_and_passes_the_globals_check(launched):
    results = {r["label"]: r for r in launched["results"]}
    for label, r in results.items():
        assert r["warnings"] == [], (launched["triton"], label, r["warnings"])  # no fallback
    names = {label: [x["name"] for x in r["launches"]] for label, r in results.items()}
    fit_and_score = ["_gram_kernel", "_smo_kernel", "_score_kernel", "_score_kernel"]
    assert names["ocsvm rbf n=256 d=128"] == fit_and_score
    assert names["ocsvm rbf n=2100 d=20"] == fit_and_score
    assert names["ocsvm linear n=64 d=3"] == ["_gram_kernel", "_smo_kernel"]  # scored by aten
    assert names["split bn bf16 channels_last"] == SPLIT_BN
    assert names["split bn fp32 NCHW"] == SPLIT_BN
    assert names["split bn relu+residual bf16 channels_last"] == SPLIT_BN  # FusedBasicBlock's bn2
    assert names["split bn relu fp32 NCHW"] == SPLIT_BN  # its bn1
    assert names["split bn onepass bf16 channels_last"] == SPLIT_BN_ONEPASS
    assert names["split bn onepass fp32 NCHW"] == SPLIT_BN_ONEPASS


def test_launch_geometry_is_what_the_kernels_are_written_for(launched):
    results = {r["label"]: r["launches"] for r in launched["results"]}
    for label, n, warps in (("ocsvm rbf n=256 d=128", 256, 4), ("ocsvm rbf n=2100 d=20", 2100, 8)):
        gram, smo, score, _ = results[label]
        assert gram["grid"] == [cdiv(n, 64), cdiv(n, 64), 1]  # 64 x 64 tiles of Q
        assert smo["grid"] == [1, 1, 1] and smo["num_warps"] == warps  # one program
        assert score["grid"] == [cdiv(3 * n, 64), 1, 1]  # 64 rows of Y per program
    shared = [x["shared"] for r in results.values() for x in r]
    assert max(shared) <= 232448  # an H100's shared memory per block (checked by the launch too)
