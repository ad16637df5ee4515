"""Split BatchNorm on this device: the per-split path (one batch_norm per split), the fused aten one
(one reduction over the (s, N/s, C, H, W) view) and, on CUDA, both Triton paths (triton: four
kernels, two launches forward and two backward; triton_onepass: two one-pass kernels, one launch
each), forward + backward of one layer.

    python benchmarks/split_bn.py [--device cpu|cuda] [--batch 512] [--channels 64] [--size 32]
        [--splits 8] [--rounds 5] [--results PATH] [--no-record] [--quick]

The CIFAR-10 recipe's first layer shape by default (512 x 64 x 32 x 32, 8 splits), in fp32 NCHW
and in bf16 channels_last (the trainer's layout under bf16 autocast); the paths alternate
round by round, so drift of a shared machine hits both alike. Where a Triton path runs, a second
table times FusedBasicBlock's bn2 on the triton path, relu(BN(x) + z) forward + backward, with
the sum and ReLU in the kernels (``SplitBatchNorm.act``) against BasicBlock's own ops after them.
The times decide which path ``SplitBatchNorm`` takes on the device (pretrain/model/split_bn.py:
per split on the CPU, triton on CUDA; triton_onepass is opt-in until it measures faster). On a
CPU the Triton paths run in Triton's interpreter when TRITON_INTERPRET=1 is set, which ``--quick``
sets (a check that both run, not a device time).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.results_md import record_table  # noqa: E402
from pretrain.model.split_bn import HAS_TRITON, TRITON_PATHS, SplitBatchNorm  # noqa: E402
from pretrain.runtime.triton_env import triton_interpreted  # noqa: E402

SETTINGS = {"fp32 NCHW": (torch.float32, False), "bf16 channels_last": (torch.bfloat16, True)}


def one_step(bn: SplitBatchNorm, x: torch.Tensor, g: torch.Tensor) -> None:
    x.grad = bn.weight.grad = bn.bias.grad = None
    bn(x).backward(g)


def block_step(bn: SplitBatchNorm, x: torch.Tensor, z: torch.Tensor, g: torch.Tensor) -> None:
    """FusedBasicBlock's bn2 (triton path): relu(BN(x) + z), forward + backward; ``bn.act`` set:
    the sum and the ReLU in the Triton kernels, else BasicBlock's own ``+=`` and ReLU after."""
    x.grad = z.grad = bn.weight.grad = bn.bias.grad = None
    if bn.act:
        y = bn(x, z)
    else:
        y = bn(x)
        y += z
        y = torch.relu_(y)
    y.backward(g)


def block_rows(a: argparse.Namespace, dev: torch.device, sync: object) -> list[str]:
    """The fused shortcut sum and ReLU against the unfused ops, triton path, each setting."""
    rows = ["", "| input (bn2: relu(BN(x) + z)) | unfused ms | fused ms | fused / unfused |",
            "|---|---|---|---|"]  # fmt: skip
    for name, (dtype, channels_last) in SETTINGS.items():
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        x, z = (torch.randn(a.batch, a.channels, a.size, a.size, device=dev) for _ in range(2))
        x, z = (t.to(dtype).contiguous(memory_format=fmt).requires_grad_() for t in (x, z))
        g = torch.randn_like(x)
        times: dict[bool, list[float]] = {False: [], True: []}
        for r in range(a.rounds + 1):  # round 0 warms up
            for fused in (False, True):
                bn = SplitBatchNorm(a.channels, a.splits, path="triton").to(dev).train()
                bn.act = fused
                sync()
                tic = time.perf_counter()
                block_step(bn, x, z, g)
                sync()
                if r:
                    times[fused].append(time.perf_counter() - tic)
        unfused, fused = (statistics.median(times[k]) for k in (False, True))
        rows.append(f"| {name} | {1e3 * unfused:.2f} | {1e3 * fused:.2f} | {fused / unfused:.2f} |")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--channels", type=int, default=64)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--splits", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--results", default=str(Path(__file__).with_name("RESULTS.md")))
    p.add_argument("--no-record", action="store_true")
    p.add_argument(
        "--quick",
        action="store_true",
        help="batch 64, 2 rounds (a CPU check: batch 16 of 8 x 8, the Triton paths interpreted)",
    )
    a = p.parse_args()
    dev = torch.device(a.device)
    if a.quick:
        a.batch, a.rounds = 64, 2
        if dev.type == "cpu" and HAS_TRITON and "triton" not in sys.modules:  # read at import
            os.environ["TRITON_INTERPRET"] = "1"  # both Triton paths run, interpreted: 16 x 8 x 8
            a.batch, a.size = 16, 8  # (at 64 x 32 x 32 they took 40 s on 2 cores)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    triton = HAS_TRITON and (dev.type == "cuda" or triton_interpreted())
    paths = ["per_split", "fused"] + (list(TRITON_PATHS) if triton else [])
    rows = [
        "| input | " + " | ".join(f"{p} ms" for p in paths) + " | fastest |",
        "|---|" + "---|" * (len(paths) + 1),
    ]
    for name, (dtype, channels_last) in SETTINGS.items():
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        x = torch.randn(a.batch, a.channels, a.size, a.size, device=dev)
        x = x.to(dtype).contiguous(memory_format=fmt).requires_grad_()
        g = torch.randn_like(x)
        times: dict[str, list[float]] = {p: [] for p in paths}
        for r in range(a.rounds + 1):  # round 0 warms up (and compiles the Triton kernels)
            for path in paths:
                bn = SplitBatchNorm(a.channels, a.splits, path=path).to(dev).train()
                sync()
                tic = time.perf_counter()
                one_step(bn, x, g)
                sync()
                if r:
                    times[path].append(time.perf_counter() - tic)
        med = {p: statistics.median(t) for p, t in times.items()}
        cells = " | ".join(f"{1e3 * med[p]:.2f}" for p in paths)
        rows.append(f"| {name} | {cells} | {min(med, key=med.get)} |")
    if triton:  # FusedBasicBlock's layers: what the fused sum and ReLU save on the triton path
        rows += block_rows(a, dev, sync)
    env = "TRITON_INTERPRET=1 " if triton and dev.type == "cpu" else ""  # Triton interpreted
    rows += [
        "",
        f"one layer, forward + backward, {a.batch} x {a.channels} x {a.size} x {a.size}, "
        f"{a.splits} splits, median of {a.rounds} alternating rounds; command: {env}python "
        f"benchmarks/split_bn.py --device {a.device} --batch {a.batch} --channels {a.channels} "
        f"--size {a.size} --splits {a.splits} --rounds {a.rounds}",
    ]
    record_table("Split BatchNorm paths", rows, a.results, not a.no_record, a.device)


if __name__ == "__main__":
    main()
