"""Launch every Triton kernel of negmine through Triton's real launch path, without a GPU.

    python tests/helpers/triton_launch_worker.py OUT.json  (a fresh process, TRITON_INTERPRET unset)

Run by ``tests/negatives/ocsvm/test_triton_launch.py`` on the installed triton and on older ones
(their folders first on PYTHONPATH). With :mod:`triton_standin`'s driver active, each launch from
the public entry points binds its arguments, parses its options, compiles for sm_90 (ptxas
included), passes the globals check and the H100's resource limits, and is recorded instead of run.
Writes the triton version, the warnings raised, each launch (kernel, grid, warps, shared memory) and
the PTX of each compile as JSON.
CPU tensors stand in for CUDA tensors, so the device checks of the entry points (which refuse CPU
tensors outside the interpreter) are relaxed here, and only here.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

import torch  # noqa: E402
import triton  # noqa: E402

from tests.helpers import triton_standin  # noqa: E402

if os.environ.get("TRITON_INTERPRET", "0") == "1":
    sys.exit("run without TRITON_INTERPRET: the interpreter skips the launch path")

launches = triton_standin.activate()

from negatives.ocsvm import kernels_triton, smo_triton, smo_triton_regs  # noqa: E402
from negatives.ocsvm.svm import OneClassSVM  # noqa: E402
from pretrain.model import split_bn  # noqa: E402
from pretrain.model import split_bn_onepass as sbo  # noqa: E402
from pretrain.model import split_bn_triton as sbt  # noqa: E402


def accept_host_tensors(dev: torch.device, what: str) -> None:
    """The device check, relaxed: host tensors stand in for device tensors here."""


smo_triton.check_device = accept_host_tensors
kernels_triton.check_device = accept_host_tensors
split_bn.triton_interpreted = lambda: True  # forward_triton's device check only: the kernels
# module read its INTERPRET flag (GPU tiles, False) at its import above


KERNELS = (smo_triton._smo_kernel, smo_triton_regs._smo_regs_kernel, kernels_triton._gram_kernel,
           kernels_triton._score_kernel,
           sbt._stats_kernel, sbt._normalize_kernel, sbt._grad_stats_kernel,
           sbt._grad_input_kernel, sbo._split_bn_forward_kernel,
           sbo._split_bn_backward_kernel)  # fmt: skip


def compiled() -> dict[int, tuple[str, str]]:
    """id -> (kernel name, sm_90 PTX) of every compile in the kernels' caches, so that the tests
    that read what CUDA runs (no FMA in the SMO, DMMA in the Gram and scoring kernels) read the
    compile of the real launch instead of compiling again."""
    out = {}
    for kernel in KERNELS:
        while not hasattr(kernel, "device_caches") and hasattr(kernel, "fn"):  # autotune etc.
            kernel = kernel.fn
        for entry in getattr(kernel, "device_caches", {}).values():
            cache = entry[0] if isinstance(entry, tuple) else entry
            for ck in getattr(cache, "values", lambda: [])():
                ptx = getattr(ck, "asm", {}).get("ptx")
                if ptx is not None:
                    out[id(ck)] = (kernel.__name__, ptx)
    return out


def record(label: str, fn) -> dict:
    start, before = len(launches), compiled()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return {
        "label": label,
        "warnings": [str(w.message) for w in caught],
        "launches": [
            {"name": x.name, "grid": list(x.grid), "num_warps": x.num_warps, "shared": x.shared}
            for x in launches[start:]
        ],
        # the kernels compiled for this label (one compiled for an earlier label: absent)
        "ptx": {name: ptx for i, (name, ptx) in compiled().items() if i not in before},
    }


def ocsvm(n: int, d: int, kernel: str, loop: str = "triton") -> None:
    gen = torch.Generator().manual_seed(n)
    X = torch.randn(n, d, generator=gen, dtype=torch.float64)
    Y = torch.randn(3 * n, d, generator=gen, dtype=torch.float32)  # MiOC scores float32 keys
    svm = OneClassSVM(loop=loop, kernel=kernel, nu=0.1, gamma=0.1).fit(X)
    if svm.path_ != loop:  # fell back: the cause
        raise RuntimeError(f"the Triton fit did not run: {svm._triton_state}")
    svm.decision_function(Y)
    svm.score(Y)
    if kernel == "rbf" and svm.__dict__.get("_score_state") != "ok":
        raise RuntimeError("the Triton scoring kernel did not run")


def splitbn(dtype: torch.dtype, channels_last: bool, path: str = "triton", act: str = "") -> None:
    """One layer forward and backward; ``act``: "relu" (ReLU fused), "relu+residual" (and the
    shortcut sum: FusedBasicBlock's bn2)."""
    x, z = (torch.randn(64, 24, 8, 8, dtype=torch.float32).to(dtype) for _ in range(2))
    if channels_last:
        x, z = (t.contiguous(memory_format=torch.channels_last) for t in (x, z))
    x.requires_grad_(), z.requires_grad_()
    bn = split_bn.SplitBatchNorm(24, 4, path=path).train()
    bn.act = bool(act)
    y = bn(x, z) if act == "relu+residual" else bn(x)
    y.backward(torch.ones_like(y))


results = [
    record("ocsvm rbf n=256 d=128", lambda: ocsvm(256, 128, "rbf")),
    record("ocsvm rbf n=2100 d=20", lambda: ocsvm(2100, 20, "rbf")),  # 8 warps, d off the tile
    record("ocsvm linear n=64 d=3", lambda: ocsvm(64, 3, "linear")),
    record("ocsvm regs rbf n=256 d=128", lambda: ocsvm(256, 128, "rbf", "triton_regs")),  # 4 warps
    record("ocsvm regs rbf n=1024 d=20", lambda: ocsvm(1024, 20, "rbf", "triton_regs")),  # 8 warps
    record("split bn bf16 channels_last", lambda: splitbn(torch.bfloat16, True)),
    record("split bn fp32 NCHW", lambda: splitbn(torch.float32, False)),
    record(
        "split bn relu+residual bf16 channels_last",
        lambda: splitbn(torch.bfloat16, True, act="relu+residual"),
    ),
    record("split bn relu fp32 NCHW", lambda: splitbn(torch.float32, False, act="relu")),
    record(
        "split bn onepass bf16 channels_last",
        lambda: splitbn(torch.bfloat16, True, "triton_onepass"),
    ),
    record("split bn onepass fp32 NCHW", lambda: splitbn(torch.float32, False, "triton_onepass")),
]
out = {"triton": triton.__version__, "torch": torch.__version__, "tiles": sbt.TILE,
       "results": results}  # fmt: skip
Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
