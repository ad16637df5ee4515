"""Where a training step's time goes: the cifar10_moco step under torch.profiler, after warm-up.

    python benchmarks/profile_step.py [--device cpu|cuda] [--quick] [--data CIFAR10_JPEG_DIR]
        [--capture off|on|both] [--steps 5] [--warmup-steps 10] [--results PATH] [--no-record]
        [--summary PATH] [--cfg cifar10_moco.yaml] [override ...]

``--capture`` picks the step: ``off`` (default) the eager step (``train_step``, as
``train.cuda_graphs=off`` runs it), ``on`` the captured step as the trainer replays it (built with
``train.cuda_graphs=on``: the trainer's own :class:`pretrain.engine.cuda_graphs.CapturedStep`,
called with each batch: its copy into the captured inputs and one replay, after its side-stream
warm-up and capture), ``both`` the eager step, then the captured one. ``on`` and ``both`` need
CUDA and a step the trainer can capture (:func:`pretrain.engine.cuda_graphs.refusal`): otherwise
exit 2, before anything is built. Prints (and appends to the results file) these tables:

- the eager step's 25 most expensive CUDA kernels of the profiled steps, with their calls per
  step, ms per step and share of the step's wall time (on a CPU: the 25 most expensive operators
  by self time);
- the eager step's time split into convolutions/matmuls, split BN, other elementwise work (and
  the rest), the optimizer, the strategy + loss, and the input's stage 2 (the batched photometric
  ops), beside the step's wall time, unprofiled, and the bare model's step
  (:func:`benchmarks.step.bare_step`: the encoders alone, the same batch), timed interleaved;
- the GPU-busy share of each step measured (CUDA; issue 60's target >= 75 %): GPU busy is the
  union of the intervals of the device's kernels, copies and sets over the profiled steps (run
  back to back), per step, and the share is that over the wall time per step of the same steps
  (:func:`busy_share`), beside the unprofiled step's median. The device-side ranges of the
  ``record_function`` annotations are not device work and are left out (they span the kernels
  under them, gaps included; before this the union counted them and read ~100 %).

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
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.results_md import record_table  # noqa: E402
from benchmarks.step import bare_step, build, model_views  # noqa: E402
from negmine_core.step import Batch  # noqa: E402
from pretrain import config  # noqa: E402
from pretrain.engine import cuda_graphs, loop  # noqa: E402
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


def device_spans(events) -> list[tuple[float, float]]:
    """``[start, end)`` in µs of the device's work among the profiler's events (``prof.events()``,
    torch.profiler's documented ``FunctionEvent``s): its kernels, copies and sets. Not the
    device-side ranges of ``record_function`` annotations (``is_user_annotation``, e.g.
    ``negmine.step``'s): they span the kernels launched under them, idle gaps included, so the
    union would be the wall."""
    cuda = torch.autograd.DeviceType.CUDA
    return [(e.time_range.start, e.time_range.end) for e in events
            if e.device_type == cuda and not e.is_user_annotation
            and e.time_range.end > e.time_range.start]  # fmt: skip


def busy_share(spans: list[tuple[float, float]], steps: int, wall_us: float) -> tuple[float, float]:
    """(GPU busy µs per step, its share of the step): the union of the device's work intervals
    over ``steps`` profiled steps (overlapping streams counted once, gaps not at all), per step,
    over the wall time per step ``wall_us`` of the same steps."""
    busy = union_us(spans) / steps
    return busy, busy / wall_us


def gpu_busy(prof, steps: int, wall_us: float) -> tuple[float | None, float | None]:
    """:func:`busy_share` of a profile's device work; (None, None) where none was recorded."""
    spans = device_spans(prof.events())
    return busy_share(spans, steps, wall_us) if spans else (None, None)


def medians_ms(fns: dict[str, Callable[[], object]], rounds: int, sync) -> dict[str, float]:
    """Each function's median ms over ``rounds`` calls, the functions interleaved round by
    round, each call between ``sync()`` calls (unprofiled)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            sync()
            tic = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - tic)
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


def profiled(step: Callable[[], object], steps: int, sync, cuda: bool) -> tuple[object, float]:
    """(the profiler, wall µs per step) of ``steps`` back-to-back calls of ``step`` under
    ``torch.profiler`` (CUDA activity too on CUDA), synchronised before and after the block."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        sync()
        tic = time.perf_counter()
        for _ in range(steps):
            with record_function("negmine.step"):
                step()
        sync()
        wall_us = 1e6 * (time.perf_counter() - tic) / steps
    return prof, wall_us


def capture_refusal(cfg, capture: str, device: str) -> str | None:
    """Why ``--capture`` cannot run here (the trainer's own refusals,
    :func:`pretrain.engine.cuda_graphs.refusal`), or None."""
    if capture == "off":
        return None
    if device != "cuda":
        return (f"--capture {capture}: the captured step (train.cuda_graphs) needs CUDA (the "
                f"device is {device}); leave --capture out (off)")  # fmt: skip
    why = cuda_graphs.refusal(cfg, device, 1)
    return None if why is None else f"--capture {capture}: train.cuda_graphs refuses it: {why}"


class Wrapped:
    """``fn`` called inside ``record_function(name)``; other attributes from ``fn``."""

    def __init__(self, fn, name: str) -> None:
        self._fn, self._name = fn, name

    def __call__(self, *args, **kwargs):
        with record_function(self._name):
            return self._fn(*args, **kwargs)

    def __getattr__(self, attr: str):
        return getattr(self._fn, attr)


def eager_phase(run, batch, views, a, sync, cuda: bool) -> dict:
    """The eager step (``train_step``, as ``train.cuda_graphs=off`` runs it): warm-up, timed
    interleaved with the bare model's step, then profiled with the strategy + loss and stage 2
    wrapped in ranges (unwrapped after): kernels and operators attributed to the step's parts."""

    def step() -> None:
        loop.train_step(run, Batch.make(*batch[:3], batch[3:]), 1e6)  # past every warm-up

    for _ in range(a.warmup):
        step()
        bare_step(run, *views)
    ms = medians_ms({"step": step, "bare": lambda: bare_step(run, *views)}, a.timed, sync)
    saved = run.strategy.negatives, run.loss_fn, run.data.augment
    run.strategy.negatives = Wrapped(run.strategy.negatives, STRATEGY_LOSS)
    run.loss_fn = Wrapped(run.loss_fn, STRATEGY_LOSS)
    run.data.augment = Wrapped(run.data.augment, AUGMENT)
    prof, wall_us = profiled(step, a.steps, sync, cuda)
    run.strategy.negatives, run.loss_fn, run.data.augment = saved
    per_cat, per_name, total = breakdown(prof, a.steps, run.device.type)
    busy, share = gpu_busy(prof, a.steps, wall_us) if cuda else (None, None)
    return {"step_ms": ms["step"], "bare_ms": ms["bare"], "wall_us": wall_us, "busy_us": busy,
            "share": share, "per_cat": per_cat, "per_name": per_name, "total": total,
            "steps": a.steps}  # fmt: skip


def captured_phase(run, batch, views, a, sync, time_bare: bool) -> dict:
    """The captured step as the trainer replays it: ``run.graph`` (``train.cuda_graphs=on``'s
    :class:`pretrain.engine.cuda_graphs.CapturedStep`, built by the trainer's setup) called with
    each batch (its copy into the captured inputs, then one replay): its eager warm-up on a side
    stream and the capture first, then timed (with the bare model's step when ``time_bare``) and
    profiled; the GPU-busy share from the device's work under the replays."""

    def step() -> None:
        run.graph(run, Batch.make(*batch[:3], batch[3:]), 1e6)

    for _ in range(max(a.warmup, run.graph.warmup + 2)):  # warm-up, capture, replays
        step()
    fns = {"step": step, **({"bare": lambda: bare_step(run, *views)} if time_bare else {})}
    ms = medians_ms(fns, a.timed, sync)
    prof, wall_us = profiled(step, a.steps, sync, True)
    busy, share = gpu_busy(prof, a.steps, wall_us)
    return {"step_ms": ms["step"], "bare_ms": ms.get("bare"), "wall_us": wall_us, "busy_us": busy,
            "share": share}  # fmt: skip


MODES = {"off": ("eager",), "on": ("captured",), "both": ("eager", "captured")}
MODE_LABEL = {
    "eager": "eager (train.cuda_graphs=off)",
    "captured": "captured (train.cuda_graphs=on, replayed as the trainer does)",
}
BUSY_TARGET = 75  # % of the step: issue 60's GPU-busy target


def busy_rows(got: dict[str, dict], timed: int) -> list[str]:
    """The GPU-busy table: one row per mode measured."""
    lines = [
        "| step | the step under the profiler (wall ms) | GPU busy ms per step | GPU-busy share of "
        f"the step | the model step, unprofiled (ms, median of {timed}) | GPU busy / the "
        "unprofiled step |",
        "|---|---|---|---|---|---|",
    ]
    for mode, r in got.items():
        wall, busy, step = r["wall_us"] / 1e3, r["busy_us"], r["step_ms"]
        if busy is None:
            cells = "no device work recorded | - | - | "
        else:
            cells = f"{busy / 1e3:.2f} | {100 * r['share']:.1f} % | "
        share = "-" if busy is None else f"{100 * busy / 1e3 / step:.1f} %"
        lines.append(f"| {MODE_LABEL[mode]} | {wall:.2f} | {cells}{step:.2f} | {share} |")
    return [*lines, "",
            "(GPU busy: the union of the intervals of the device's kernels, copies and sets over "
            "the profiled steps, back to back, per step; the share: over the same steps' wall "
            f"time per step; target >= {BUSY_TARGET} %)", ""]  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cfg", default="cifar10_moco.yaml")
    p.add_argument("--data", default="", help="a CIFAR-10 JPEG folder (train/, test/)")
    p.add_argument("--steps", type=int, default=0, help="profiled steps (default 5, quick 2)")
    p.add_argument("--warmup-steps", type=int, default=0, help="default 10, quick 1")
    p.add_argument("--timed-steps", type=int, default=0, help="unprofiled (default 20, quick 2)")
    p.add_argument("--capture", default="off", choices=tuple(MODES),
                   help="the eager step (off), the captured step (on: train.cuda_graphs, CUDA "
                        "only) or both")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="tiny model, few steps (CI)")
    p.add_argument("--device", default=dist.device_type(), help="default: the trainer's")
    p.add_argument("--results", default=str(Path(__file__).with_name("RESULTS.md")))
    p.add_argument("--no-record", action="store_true", help="print only")
    p.add_argument("--summary", default="", help="append | figure | value | rows here")
    p.add_argument("overrides", nargs="*")
    a = p.parse_args()
    a.steps = a.steps or (2 if a.quick else 5)
    a.warmup = a.warmup_steps or (1 if a.quick else 10)
    a.timed = a.timed_steps or (2 if a.quick else 20)
    modes = MODES[a.capture]
    if "captured" in modes:  # before anything is built or written
        why = capture_refusal(config.load(a.cfg, a.overrides), a.capture, a.device)
        if why:
            p.error(why)
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
    graphs = ["train.cuda_graphs=on"] if "captured" in modes else []  # run.graph: the trainer's
    run, batch = build(a.cfg, [*over, *a.overrides, *graphs], a.device)
    cuda = run.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    views = model_views(run, batch)
    got: dict[str, dict] = {}
    if "eager" in modes:
        got["eager"] = eager_phase(run, batch, views, a, sync, cuda)
    if "captured" in modes:
        got["captured"] = captured_phase(run, batch, views, a, sync, "eager" not in modes)
    bare_ms = got[modes[0]]["bare_ms"]

    cfg = run.cfg
    title = (f"{a.cfg} {' '.join(a.overrides)}: batch {cfg.train.batch_size}, K "
             f"{cfg.moco.queue_size}, {arch_label(cfg.model.arch, cfg.model.width)}, split BN "
             f"{cfg.model.split_bn}, amp {cfg.train.amp}, negatives {cfg.negatives.name}; "
             f"{a.steps} steps profiled after {a.warmup} warm-up; "
             f"{' and '.join(MODE_LABEL[m] for m in modes)}; data "
             f"{a.data or 'random images (CIFAR-10 format)'}")  # fmt: skip
    lines = [f"profile, {title}", ""]
    if "eager" in modes:
        lines += eager_lines(got["eager"], a, cuda)
    else:  # the bare model's step, as the eager table gives it
        lines += ["| the bare model's step | ms |", "|---|---|", bare_line(bare_ms, a.timed), ""]
    if cuda:
        lines += busy_rows(got, a.timed)
    record_table("Profile of the training step", lines, a.results, not a.no_record, a.device)
    if a.summary:
        with open(a.summary, "a") as f:
            f.write("".join(summary_rows(a.cfg, got, bare_ms, cuda)))


def eager_lines(r: dict, a, cuda: bool) -> list[str]:
    """The eager step's tables: the 25 most expensive kernels (CPU: operators), the step split
    into its parts, beside the unprofiled step and the bare model's."""
    wall_us, per_cat, total, steps = r["wall_us"], r["per_cat"], r["total"], a.steps
    what = "CUDA kernel" if cuda else "operator (self CPU time)"
    head = f"| {what} | calls per step | ms per step | share of the step |"
    lines = [head, "|" + "---|" * 4]
    top = sorted(r["per_name"].items(), key=lambda kv: -kv[1][0])[:25]
    for name, (us, calls) in top:
        short = name if len(name) <= 90 else name[:87] + "..."
        lines.append(f"| `{short}` | {calls:.0f} | {us / 1e3:.3f} | {100 * us / wall_us:.1f} % |")
    busy = "GPU busy (all kernels, summed)" if cuda else "operators' self time (all)"
    lines += ["", "| part of the step | ms per step | share of the step |", "|---|---|---|"]
    for cat in CATEGORIES:
        lines.append(f"| {cat} | {per_cat[cat] / 1e3:.2f} | {100 * per_cat[cat] / wall_us:.1f} % |")
    return [
        *lines,
        f"| {busy} | {total / steps / 1e3:.2f} | {100 * total / steps / wall_us:.1f} % |",
        f"| the step under the profiler (wall) | {wall_us / 1e3:.2f} | 100 % |",
        f"| the model step, unprofiled (median of {a.timed}) | {r['step_ms']:.2f} | |",
        f"{bare_line(r['bare_ms'], a.timed)} step / bare {r['step_ms'] / r['bare_ms']:.2f}x |",
        "",
    ]


def bare_line(bare_ms: float, timed: int) -> str:
    return (f"| the bare model's step (bare model ms: step.py bare_step, median of {timed}) | "
            f"{bare_ms:.2f} |")  # fmt: skip


def summary_rows(cfg: str, got: dict[str, dict], bare_ms: float, cuda: bool) -> list[str]:
    """The ``| figure | value |`` rows for the GPU suite's summary, per mode measured."""
    rows = []
    for mode, r in got.items():
        name = f"profile {cfg}" + (" captured" if mode == "captured" else "")
        rows.append(f"| {name}: step ms (unprofiled), bare model's step ms | "
                    f"{r['step_ms']:.1f}, {bare_ms:.1f} |\n")  # fmt: skip
        if mode == "eager":
            shares = ", ".join(f"{c} {100 * r['per_cat'][c] / r['wall_us']:.0f} %"
                               for c in CATEGORIES)  # fmt: skip
            rows.append(f"| {name}: share of the profiled step ({r['wall_us'] / 1e3:.1f} ms) | "
                        f"{shares} |\n")  # fmt: skip
        if not cuda:  # the operators' self time stands in for the device's
            ops = r["total"] / 1e3 / r["steps"]
            rows.append(f"| {name}: operators ms per step, share of the unprofiled step | "
                        f"{ops:.2f}, {100 * ops / r['step_ms']:.0f} % |\n")  # fmt: skip
        elif r["busy_us"] is not None:
            busy = r["busy_us"] / 1e3
            rows.append(f"| {name}: GPU busy ms per step, share of the profiled step, of the "
                        f"unprofiled step | {busy:.2f}, {100 * r['share']:.0f} %, "
                        f"{100 * busy / r['step_ms']:.0f} % |\n")  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
