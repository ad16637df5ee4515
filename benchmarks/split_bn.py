"""Split BatchNorm on this device: the per-split path (one batch_norm per split) against the fused
one (one reduction over the (s, N/s, C, H, W) view), forward + backward of one layer.

    python benchmarks/split_bn.py [--device cpu|cuda] [--batch 512] [--channels 64] [--size 32]
        [--splits 8] [--rounds 5] [--results PATH] [--no-record]

The CIFAR-10 recipe's first layer shape by default (512 x 64 x 32 x 32, 8 splits), in fp32 NCHW
and in bf16 channels_last (the trainer's layout under bf16 autocast); the paths alternate
round by round, so drift of a shared machine hits both alike. The ratio decides which path
``SplitBatchNorm`` takes on the device (pretrain/split_bn.py: per split on the CPU).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.results_md import record_table  # noqa: E402
from pretrain.split_bn import SplitBatchNorm  # noqa: E402

SETTINGS = {"fp32 NCHW": (torch.float32, False), "bf16 channels_last": (torch.bfloat16, True)}


def one_step(bn: SplitBatchNorm, x: torch.Tensor, g: torch.Tensor) -> None:
    x.grad = bn.weight.grad = bn.bias.grad = None
    bn(x).backward(g)


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
    a = p.parse_args()
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    rows = [
        "| input | per-split ms | fused ms | fused speed vs per-split |",
        "|---|---|---|---|",
    ]
    for name, (dtype, channels_last) in SETTINGS.items():
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        x = torch.randn(a.batch, a.channels, a.size, a.size, device=dev)
        x = x.to(dtype).contiguous(memory_format=fmt).requires_grad_()
        g = torch.randn_like(x)
        times: dict[bool, list[float]] = {False: [], True: []}
        for r in range(a.rounds + 1):  # round 0 warms up
            for fused in (False, True):
                bn = SplitBatchNorm(a.channels, a.splits, fused=fused).to(dev).train()
                sync()
                tic = time.perf_counter()
                one_step(bn, x, g)
                sync()
                if r:
                    times[fused].append(time.perf_counter() - tic)
        per, fus = (statistics.median(times[f]) for f in (False, True))
        rows.append(f"| {name} | {1e3 * per:.1f} | {1e3 * fus:.1f} | {per / fus:.2f}x |")
    rows += [
        "",
        f"one layer, forward + backward, {a.batch} x {a.channels} x {a.size} x {a.size}, "
        f"{a.splits} splits, median of {a.rounds} alternating rounds; command: python "
        f"benchmarks/split_bn.py --device {a.device} --batch {a.batch} --channels {a.channels} "
        f"--size {a.size} --splits {a.splits} --rounds {a.rounds}",
    ]
    record_table("Split BatchNorm paths", rows, a.results, not a.no_record, a.device)


if __name__ == "__main__":
    main()
