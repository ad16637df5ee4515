"""Where a training step's time goes: the cifar10_moco step under torch.profiler, after warm-up.

    python benchmarks/profile_step.py [--device cpu|cuda] [--quick] [--data CIFAR10_JPEG_DIR]
        [--steps 5] [--warmup-steps 10] [--results PATH] [--no-record] [--summary PATH]
        [--cfg cifar10_moco.yaml] [override ...]

Prints (and appends to the results file) two tables:

- the 25 most expensive CUDA kernels of the profiled steps, with their calls per step, ms per step
  and share of the step's wall time (on a CPU: the 25 most expensive operators by self time);
- the GPU-busy share of the step (CUDA): the time the GPU ran anything (the union of the device
  events' intervals) per step, over the profiled step and over the unprofiled step's median;
- the step's time split into convolutions/matmuls, split BN, other elementwise work (and the
  rest), the optimizer, the strategy + loss, and the input's stage 2 (the batched photometric
  ops), beside the step's wall time, unprofiled, and the bare model's step
  (:func:`benchmarks.step.bare_step`: the encoders alone, the same batch), timed interleaved.

How a kernel (CPU: an operator's self time) is assigned: the optimizer's ``Optimizer.step`` /
``zero_grad`` ranges first; then the ranges this script wraps around the strategy's
``negatives`` with the loss (``negmine.strategy_loss``) and around stage 2 (``negmine.augment``),
also for the backward of what ran in them (an autograd node is traced back to its forward
operator through its sequence number); then split BN (``batch_norm``, the ``split_bn`` ops and
their Triton kernels), convolutions/matmuls (``conv``, ``mm``, ``linear``, or a GEMM kernel), and
everything else. On a CPU the profiler records CPU activity only (``--quick`` in CI: tiny model).

The data: ``--data`` a CIFAR-10 JPEG folder (``train/``, ``test/``: the ``.gpu/`` bundle's), as
``data.name=imagefolder``; without it CIFAR-10 in its true on-disk format, written here with
random images (pretrain/testing/fakedata.py).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.results_md import record_table  # noqa: E402
from benchmarks.step import bare_step, build, model_views  # noqa: E402
from negmine_core.step import Batch  # noqa: E402
from pretrain.engine import loop  # noqa: E402
from pretrain.model.encoders import arch_label  # noqa: E402
from pretrain.runtime import dist  # noqa: E402

CATEGORIES = (
    "convolutions/matmuls",
    "split BN",
    "other elementwise (and the rest)",
    "optimizer",
    "strategy + loss",
    "input stage 2 (augment)",
)
STRATEGY_LOSS, AUGMENT = "negmine.strategy_loss", "negmine.augment"
SPLIT_BN_KERNELS = ("_stats_kernel", "_normalize_kernel", "_grad_stats_kernel",
                    "_grad_input_kernel",  # model.split_bn=triton; then triton_onepass's
                    "_split_bn_forward_kernel", "_split_bn_backward_kernel")  # fmt: skip
BACKWARD = re.compile(r"Backward\d*$")
GEMM = re.compile(r"gemm|xmma|cutlass|wgmma|conv|implicit|dgrad|wgrad|sm\d+_", re.I)


def classify(names: list[str], kernel: str = "") -> str:
    """The category of a kernel (or operator) from the names of the operators around it."""
    if any(n.startswith("Optimizer.") for n in names):
        return "optimizer"
    if STRATEGY_LOSS in names:
        return "strategy + loss"
    if AUGMENT in names:
        return "input stage 2 (augment)"
    low = [n.lower() for n in names]
    if any("batch_norm" in n or "split_bn" in n or "batchnorm" in n for n in low) or (
        kernel.startswith(SPLIT_BN_KERNELS) or "bn_fw" in kernel or "bn_bw" in kernel
    ):
        return "split BN"
    mm = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::einsum")
    if any("conv" in n or n in mm or n.startswith(("mmbackward", "addmmbackward")) for n in low):
        return "convolutions/matmuls"
    if kernel and GEMM.search(kernel):
        return "convolutions/matmuls"
    return "other elementwise (and the rest)"


def chain(evt) -> list[str]:
    names = []
    while evt is not None:
        names.append(evt.name)
        evt = evt.cpu_parent
    return names


def attribute(events) -> list[tuple[object, list[str]]]:
    """Each CPU operator with the names it is classified by: its own ancestors, and for an
    operator under an autograd node (``XBackward0``) also that node's forward operator's."""
    forward = {}
    for e in sorted(events, key=lambda e: e.time_range.start):
        if e.sequence_nr >= 0 and not BACKWARD.search(e.name):
            forward.setdefault((e.thread, e.sequence_nr), e)
    out = []
    for e in events:
        names = chain(e)
        node = e
        while node is not None and not (BACKWARD.search(node.name) and node.sequence_nr >= 0):
            node = node.cpu_parent
        if node is not None:
            fwd = forward.get((node.fwd_thread, node.sequence_nr))
            if fwd is not None:
                names = [*names, *chain(fwd)]
        out.append((e, names))
    return out


def breakdown(prof, steps: int, device: str) -> tuple[dict, dict, float]:
    """(category -> us per step, name -> [us per step, calls per step], profiled us in all)."""
    per_cat: dict[str, float] = dict.fromkeys(CATEGORIES, 0.0)
    per_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    total = 0.0
    for e, names in attribute(events):
        if device == "cuda":
            for k in e.kernels:
                cat = classify(names, k.name)
                per_cat[cat] += k.duration / steps
                per_name[k.name][0] += k.duration / steps
                per_name[k.name][1] += 1 / steps
                total += k.duration
        elif e.name not in ("negmine.step",):  # CPU: operators' self time
            cat = classify(names)
            per_cat[cat] += e.self_cpu_time_total / steps
            per_name[e.name][0] += e.self_cpu_time_total / steps
            per_name[e.name][1] += 1 / steps
            total += e.self_cpu_time_total
    return per_cat, dict(per_name), total


def union_us(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``[start, end)`` intervals: the time at least one ran."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def gpu_busy_us(prof, steps: int) -> float | None:
    """Per step, the time the GPU ran anything (the union of the device events' intervals:
    kernels, copies, sets; overlapping streams counted once); None without device events."""
    cuda = torch.autograd.DeviceType.CUDA
    spans = [(e.time_range.start, e.time_range.end) for e in prof.events()
             if e.device_type == cuda and e.time_range.end > e.time_range.start]  # fmt: skip
    return union_us(spans) / steps if spans else None


class Wrapped:
    """``fn`` called inside ``record_function(name)``; other attributes from ``fn``."""

    def __init__(self, fn, name: str) -> None:
        self._fn, self._name = fn, name

    def __call__(self, *args, **kwargs):
        with record_function(self._name):
            return self._fn(*args, **kwargs)

    def __getattr__(self, attr: str):
        return getattr(self._fn, attr)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cfg", default="cifar10_moco.yaml")
    p.add_argument("--data", default="", help="a CIFAR-10 JPEG folder (train/, test/)")
    p.add_argument("--steps", type=int, default=0, help="profiled steps (default 5, quick 2)")
    p.add_argument("--warmup-steps", type=int, default=0, help="default 10, quick 1")
    p.add_argument("--timed-steps", type=int, default=0, help="unprofiled (default 20, quick 2)")
    p.add_argument("--quick", action="store_true", help="tiny model, few steps (CI)")
    p.add_argument("--device", default=dist.device_type(), help="default: the trainer's")
    p.add_argument("--results", default=str(Path(__file__).with_name("RESULTS.md")))
    p.add_argument("--no-record", action="store_true", help="print only")
    p.add_argument("--summary", default="", help="append | figure | value | rows here")
    p.add_argument("overrides", nargs="*")
    a = p.parse_args()
    steps = a.steps or (2 if a.quick else 5)
    warmup = a.warmup_steps or (1 if a.quick else 10)
    timed = a.timed_steps or (2 if a.quick else 20)
    out = tempfile.mkdtemp(prefix="negmine_profile_run_")  # its own: benchmarks may run at once
    over = [f"out_dir={out}", "data.num_workers=0", "train.progress_bar=false"]
    if a.data:
        over += ["data.name=imagefolder", f"data.root={a.data}"]
    else:
        from pretrain.testing.fakedata import write_cifar10

        root = Path(tempfile.mkdtemp(prefix="negmine_profile_"))
        write_cifar10(root, per_batch=16 if a.quick else 1024, test=16)
        over.append(f"data.root={root}")
    if a.quick:
        over += ["model.width=8", "train.batch_size=16", "moco.queue_size=64"]
    run, batch = build(a.cfg, [*over, *a.overrides], a.device)
    cuda = run.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    views = model_views(run, batch)

    def step() -> None:
        loop.train_step(run, Batch.make(*batch[:3], batch[3:]), 1e6)  # past every warm-up

    for _ in range(warmup):
        step()
        bare_step(run, *views)
    times: dict[str, list[float]] = {"step": [], "bare": []}
    for _ in range(timed):  # interleaved, unprofiled
        for name, fn in (("step", step), ("bare", lambda: bare_step(run, *views))):
            sync()
            tic = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - tic)
    step_ms, bare_ms = (1e3 * statistics.median(times[n]) for n in ("step", "bare"))

    run.strategy.negatives = Wrapped(run.strategy.negatives, STRATEGY_LOSS)
    run.loss_fn = Wrapped(run.loss_fn, STRATEGY_LOSS)
    run.data.augment = Wrapped(run.data.augment, AUGMENT)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        sync()
        tic = time.perf_counter()
        for _ in range(steps):
            with record_function("negmine.step"):
                step()
        sync()
        wall_us = 1e6 * (time.perf_counter() - tic) / steps
    per_cat, per_name, total = breakdown(prof, steps, run.device.type)
    busy_us = (gpu_busy_us(prof, steps) if cuda else None) or total / steps

    cfg = run.cfg
    what = "CUDA kernel" if cuda else "operator (self CPU time)"
    title = (f"{a.cfg} {' '.join(a.overrides)}: batch {cfg.train.batch_size}, K "
             f"{cfg.moco.queue_size}, {arch_label(cfg.model.arch, cfg.model.width)}, split BN "
             f"{cfg.model.split_bn}, amp {cfg.train.amp}, negatives {cfg.negatives.name}; "
             f"{steps} steps profiled after {warmup} warm-up; data "
             f"{a.data or 'random images (CIFAR-10 format)'}")  # fmt: skip
    head = f"| {what} | calls per step | ms per step | share of the step |"
    lines = [f"profile, {title}", "", head, "|" + "---|" * 4]
    top = sorted(per_name.items(), key=lambda kv: -kv[1][0])[:25]
    for name, (us, calls) in top:
        short = name if len(name) <= 90 else name[:87] + "..."
        lines.append(f"| `{short}` | {calls:.0f} | {us / 1e3:.3f} | {100 * us / wall_us:.1f} % |")
    busy = "GPU busy (all kernels)" if cuda else "operators' self time (all)"
    lines += ["", "| part of the step | ms per step | share of the step |", "|---|---|---|"]
    for cat in CATEGORIES:
        lines.append(f"| {cat} | {per_cat[cat] / 1e3:.2f} | {100 * per_cat[cat] / wall_us:.1f} % |")
    busy_line = (f"GPU busy (the union of the device events: kernels, copies) | "
                 f"{busy_us / 1e3:.2f} | {100 * busy_us / wall_us:.1f} % (of the unprofiled step: "
                 f"{100 * busy_us / 1e3 / step_ms:.1f} %)") if cuda else None  # fmt: skip
    lines += [
        f"| {busy} | {total / steps / 1e3:.2f} | {100 * total / steps / wall_us:.1f} % |",
        *([f"| {busy_line} |"] if busy_line else []),
        f"| the step under the profiler (wall) | {wall_us / 1e3:.2f} | 100 % |",
        f"| the model step, unprofiled (median of {timed}) | {step_ms:.2f} | |",
        f"| the bare model's step (bare model ms: step.py bare_step, median of {timed}) | "
        f"{bare_ms:.2f} | step / bare {step_ms / bare_ms:.2f}x |",
        "",
    ]
    record_table("Profile of the training step", lines, a.results, not a.no_record, a.device)
    if a.summary:
        shares = ", ".join(f"{cat} {100 * per_cat[cat] / wall_us:.0f} %" for cat in CATEGORIES)
        with open(a.summary, "a") as f:
            f.write(f"| profile {a.cfg}: step ms (unprofiled), bare model's step ms | "
                    f"{step_ms:.1f}, {bare_ms:.1f} |\n"
                    f"| profile {a.cfg}: share of the profiled step ({wall_us / 1e3:.1f} ms) | "
                    f"{shares} |\n"
                    f"| profile {a.cfg}: {'GPU busy' if cuda else 'operators'} ms per step, "
                    f"share of the unprofiled step | {busy_us / 1e3:.2f}, "
                    f"{100 * busy_us / 1e3 / step_ms:.0f} % |\n")  # fmt: skip


if __name__ == "__main__":
    main()
