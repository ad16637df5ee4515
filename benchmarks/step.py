"""Training-step time and peak memory: the negative strategies, and the precision/compile settings.

    python benchmarks/step.py [--mode strategies|methods|precision|all] [--quick]
        [--device cpu|cuda] [--sync-debug error] [--results PATH] [--no-record]
        [--cfg digits_moco.yaml] [override ...]

``strategies`` (default): every registered negative strategy on ``--cfg`` (digits sizes on the
digits configs), ratio to ``none``. ``methods``: every negative baseline of issue 12 (the loss-level
ones, i-Mix, AdCo, FNC with and without its support views' forward), ratio to plain MoCo.
``precision``: on the digits model (``digits_moco.yaml``) and
the CIFAR-10 model (``cifar10_moco.yaml``: ResNet-18, CIFAR stem, batch 512, K 4096; on a tiny
CIFAR-10 written in its true format by pretrain/testing/fakedata.py), the full training step (both
encoders, loss, queue) in fp32 eager, fp32 + channels_last, bf16 autocast, bf16 + channels_last,
compile, compile + bf16 (+ channels_last); ratio to fp32 eager. The trainer runs bf16 in
channels_last on both devices and fp32 in channels_last on CUDA only (``precision.channels_last``):
"bf16" sets ``train.channels_last=false``; "fp32 channels_last" (CPU only) converts model and batch
here. Every setting of a table is built once (same seed,
model and batch) and timed round-robin, so drift of a shared machine hits them alike.

Peak memory per step: CUDA ``torch.cuda.max_memory_allocated`` (reset per setting) minus the
allocation before the steps; CPU the peak resident set (VmHWM of /proc/self/status, reset through
/proc/self/clear_refs before each setting's steps) above the resident set before them.

``--sync-debug error``: on CUDA the timed steps run under torch.cuda.set_sync_debug_mode("error")
(a host-device sync raises); on the CPU there is nothing to raise on: a no-op, said in the output.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import negatives  # noqa: E402
from benchmarks.results_md import record_table  # noqa: E402
from negmine_core.step import Batch  # noqa: E402
from pretrain import config  # noqa: E402
from pretrain.engine import loop  # noqa: E402
from pretrain.model.encoders import arch_label  # noqa: E402
from pretrain.runtime import dist  # noqa: E402
from pretrain.runtime import precision as amp  # noqa: E402 (step.py has a precision mode)

DIGITS_KWARGS = {  # the digits configs' sizes, so that every strategy runs on the 256-key queue
    "mioc": "{num_synthetic: 64, num_inlier_synthetic: 32}",
    "mochi": "{num_hard: 64, num_mix: 32, num_query_mix: 16}",
    "modified_mochi": "{num_hard: 64, num_mix: 32, num_query_mix: 16}",
    "adco": "{bank_size: 256}",
}
PRECISION = {  # name: (overrides, channels_last by the benchmark)
    "fp32 eager": (["train.amp='off'"], False),
    "fp32 channels_last": (["train.amp='off'"], True),  # the trainer keeps fp32 CPU runs NCHW
    "bf16": (["train.amp=bf16", "train.channels_last=false"], False),
    "bf16 channels_last": (["train.amp=bf16"], False),  # the trainer's own bf16 CPU layout
    "compile": (["train.amp='off'", "train.compile=true"], False),
    "compile + bf16": (
        ["train.amp=bf16", "train.compile=true", "train.channels_last=false"],
        False,
    ),
    "compile + bf16 channels_last": (["train.amp=bf16", "train.compile=true"], False),
}


def rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class PeakMemory:
    """Peak bytes above the start while open (see the module docstring for what is measured)."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.peak = device, 0

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            with contextlib.suppress(OSError):
                Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
            self.base = rss_kib("VmRSS") * 1024
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() - self.base
        else:
            self.peak = rss_kib("VmHWM") * 1024 - self.base


def build(cfg_name: str, overrides: list[str], device: str, channels_last: bool = False):
    cfg = config.load(cfg_name, overrides)
    run = loop.setup(cfg)
    if run.device.type != device:
        sys.exit(f"--device {device} but the run is on {run.device}")
    run.moco.train()
    x1, x2, y, _, *rows = next(iter(run.data.train_loader))  # rows: stage-2 parameters
    x1, x2, y, *rows = (t.to(run.device) for t in (x1, x2, y, *rows))
    if channels_last and run.device.type == "cpu":  # the trainer does this on CUDA only
        run.moco.to(memory_format=torch.channels_last)
        x1, x2 = (x.contiguous(memory_format=torch.channels_last) for x in (x1, x2))
    return run, (x1, x2, y, *rows)


def model_views(run, batch: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalised float views of a batch from :func:`build`, as the step feeds the encoders (stage
    2 of ``data.augment_on: device`` run here, once; the trainer's memory format)."""
    x1, x2, _, *rows = batch
    if rows:
        x = run.data.augment(torch.cat([x1, x2]), torch.cat([rows[0][:, 0], rows[0][:, 1]]))
        x1, x2 = x.chunk(2)
    if amp.channels_last(run.cfg.train.channels_last, run.cfg.train.amp, run.device):
        x1, x2 = (x.contiguous(memory_format=torch.channels_last) for x in (x1, x2))
    return x1, x2


def bare_step(run, x1: torch.Tensor, x2: torch.Tensor) -> None:
    """The bare model's step: the query encoder's forward and backward on ``x1`` and the key
    encoder's forward on ``x2`` (both under the trainer's autocast; no strategy, loss, queue,
    optimizer or input pipeline). ``x1``, ``x2`` from :func:`model_views`."""
    with run.autocast():
        q = run.moco.query_encoder(x1)
        with torch.no_grad():
            run.moco.encoder_k(x2)
    q.float().square().sum().backward()
    run.moco.encoder_q.zero_grad(set_to_none=True)


def time_settings(
    settings: dict, args: argparse.Namespace, extra: dict | None = None
) -> dict[str, tuple[float, float, int]]:
    """Round-robin timing; returns name -> (median s, p90 s, peak bytes). ``extra``: name ->
    callable, timed in the same rounds (peak 0)."""
    extra = extra or {}
    dev = next(iter(settings.values()))[0].device
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    debug = args.sync_debug == "error" and dev.type == "cuda"
    times: dict[str, list[float]] = {n: [] for n in [*settings, *extra]}
    peaks = dict.fromkeys([*settings, *extra], 0)
    for r in range(args.warmup_steps + args.steps):
        for name, fn in extra.items():
            sync()
            tic = time.perf_counter()
            fn()
            sync()
            if r >= args.warmup_steps:
                times[name].append(time.perf_counter() - tic)
        for name, (run, batch) in settings.items():
            with PeakMemory(dev) as mem:
                sync()
                strict = debug and type(run.strategy).syncs_per_step == 0  # its declared count
                if debug:  # "error" where the documented count is 0, "warn" for MiOC's checks
                    torch.cuda.set_sync_debug_mode("error" if strict else "warn")
                tic = time.perf_counter()
                loop.train_step(run, Batch.make(*batch[:3], batch[3:]), 1e6)  # past every warm-up
                if debug:
                    torch.cuda.set_sync_debug_mode(0)
                sync()
            if r >= args.warmup_steps:
                times[name].append(time.perf_counter() - tic)
                peaks[name] = max(peaks[name], mem.peak)
    out = {}
    for name, ts in times.items():
        out[name] = (statistics.median(ts), sorted(ts)[math.ceil(0.9 * (len(ts) - 1))], peaks[name])
    return out


def table(result: dict, base: str, what: str) -> list[str]:
    rows = [
        f"| {what} | model step ms (median) | p90 ms | speed vs {base} | peak MiB |",
        "|---|---|---|---|---|",
    ]
    for name, (med, p90, peak) in result.items():
        rows.append(
            f"| {name} | {1e3 * med:.1f} | {1e3 * p90:.1f} | {result[base][0] / med:.2f}x | "
            f"{peak / 2**20:.1f} |"
        )
    return rows


def strategies(args: argparse.Namespace, common: list[str]) -> list[str]:
    settings = {}
    for name in negatives.list_strategies():
        extra = [f"negatives.name={name}"]
        if args.cfg.startswith("digits") and name in DIGITS_KWARGS:
            extra.append(f"negatives.kwargs={DIGITS_KWARGS[name]}")
        if negatives.strategies.get(name).replaces_queue:  # adco: its bank, not the queue
            extra += ["loss.name=nt_xent", "loss.contrast_queue=false"]
        settings[name] = build(args.cfg, [*common, *args.overrides, *extra], args.device)
    res = time_settings(settings, args)
    cfg = settings["none"][0].cfg
    title = (f"{args.cfg} {' '.join(args.overrides)}: batch {cfg.train.batch_size}, "
             f"K {cfg.moco.queue_size}, {cfg.model.arch}, amp {cfg.train.amp}")  # fmt: skip
    return [f"strategies, {title}", "", *table(res, "none", "strategy"), ""]


BASELINES = {  # issue 12: name -> overrides of --cfg (the digits sizes), ratio to "moco"
    "moco": [],
    "debiased": ["loss.name=debiased"],
    "hard": ["loss.name=hard"],
    "decoupled": ["loss.name=decoupled"],
    "decoupled sigma": ["loss.name=decoupled", "loss.kwargs={sigma: 0.5}"],
    "ring": ["loss.name=ring"],
    "imix": ["loss.name=imix"],
    "adco": [
        "negatives.name=adco",
        "negatives.kwargs={bank_size: 256}",
        "loss.name=nt_xent",
        "loss.contrast_queue=false",
    ],  # fmt: skip
    "fnc (4 support views)": ["loss.name=fnc", "data.support_views=4"],
}


def methods(args: argparse.Namespace, common: list[str]) -> list[str]:
    """Every negative baseline's full step, ratio to plain MoCo; FNC also without its support
    views' forward pass (timed on its own, interleaved, and subtracted)."""
    settings = {n: build(args.cfg, [*common, *args.overrides, *o], args.device)
                for n, o in BASELINES.items()}  # fmt: skip
    run, batch = settings["fnc (4 support views)"]
    params, support = batch[3], batch[4]

    def support_forward() -> None:
        with torch.no_grad():
            x = run.data.augment(support.flatten(0, 1), params[:, 2:].flatten(0, 1))
            with run.autocast():
                run.moco.encode_keys(x)

    res = time_settings(settings, args, extra={"fnc support forward": support_forward})
    fwd = res.pop("fnc support forward")
    med, p90, peak = res["fnc (4 support views)"]
    res["fnc without the support forward"] = (med - fwd[0], p90 - fwd[0], peak)
    cfg = settings["moco"][0].cfg
    title = (f"{args.cfg} {' '.join(args.overrides)}: batch {cfg.train.batch_size}, "
             f"K {cfg.moco.queue_size}, {cfg.model.arch}, amp {cfg.train.amp}")  # fmt: skip
    note = (f"(fnc's support forward alone: {1e3 * fwd[0]:.1f} ms, subtracted from its median "
            "for the last row; targets: loss-level <= 1.10x time, adco <= 1.5x, i.e. speed >= "
            "0.91x and >= 0.67x)")  # fmt: skip
    return [f"negative baselines, {title}", "", *table(res, "moco", "method"), "", note, ""]


def precision(args: argparse.Namespace, common: list[str]) -> list[str]:
    from pretrain.testing.fakedata import write_cifar10

    out = []
    root = tempfile.mkdtemp(prefix="negmine_step_")
    per_batch = 64 if args.quick else 1024  # 5 batches: 320 / 5120 training images
    write_cifar10(Path(root), per_batch=per_batch, test=16)
    quick = ["model.width=8", "train.batch_size=32", "moco.queue_size=64"] if args.quick else []
    models = {
        "digits_moco.yaml": quick,
        "cifar10_moco.yaml": [f"data.root={root}", *quick],
    }
    names = [n for n in PRECISION if args.device == "cpu" or n != "fp32 channels_last"]
    if args.settings:
        names = ["fp32 eager", *(n for n in args.settings.split(",") if n != "fp32 eager")]
    for cfg_name, sized in models.items():
        settings = {}
        for name in names:
            over, cl = PRECISION[name]
            settings[name] = build(cfg_name, [*common, *sized, *over], args.device, cl)
        res = time_settings(settings, args)
        torch._dynamo.reset()
        cfg = settings["fp32 eager"][0].cfg
        title = (f"{cfg_name}: batch {cfg.train.batch_size}, K {cfg.moco.queue_size}, "
                 f"{arch_label(cfg.model.arch, cfg.model.width)}")  # fmt: skip
        out += [f"precision, {title}", "", *table(res, "fp32 eager", "setting"), ""]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--mode", choices=("strategies", "methods", "precision", "all"), default="strategies"
    )
    p.add_argument("--cfg", default="digits_moco.yaml", help="strategies mode: the config")
    p.add_argument("--steps", type=int, default=0, help="timed steps per setting")
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="tiny models, few steps (CI)")
    p.add_argument("--device", default=dist.device_type(), help="default: the trainer's")
    p.add_argument("--sync-debug", choices=("off", "error"), default="off")
    p.add_argument("--settings", default="", help="precision mode: comma list (default: all)")
    p.add_argument("--results", default=str(Path(__file__).with_name("RESULTS.md")))
    p.add_argument("--no-record", action="store_true", help="print only")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    args.steps = args.steps or (2 if args.quick else 20)
    args.warmup_steps = 1 if args.quick else args.warmup_steps
    out = tempfile.mkdtemp(prefix="negmine_bench_")  # its own: two benchmarks may run at once
    common = [f"out_dir={out}", "data.num_workers=0", "train.progress_bar=false"]
    if args.quick and args.mode != "precision":
        args.overrides = ["model.width=8", "train.batch_size=32", *args.overrides]
    lines = []
    if args.mode in ("strategies", "all"):
        lines += strategies(args, common)
    if args.mode in ("methods", "all"):
        lines += methods(args, common)
    if args.mode in ("precision", "all"):
        lines += precision(args, common)
    note = {
        "off": "sync debug off",
        "error": "timed steps under torch.cuda.set_sync_debug_mode('error')"
        if args.device == "cuda"
        else "--sync-debug error: no-op on the CPU (nothing to raise on)",
    }[args.sync_debug]
    lines += [
        f"{args.steps} steps after {args.warmup_steps} warm-up, settings interleaved; {note}; "
        + (
            "peak = CUDA max_memory_allocated above the start"
            if args.device == "cuda"
            else "peak = resident set (VmHWM) above the start of the step"
        )  # fmt: skip
    ]
    record_table("Training step", lines, args.results, not args.no_record, args.device)


if __name__ == "__main__":
    main()
