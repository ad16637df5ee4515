"""Training-step time of the negative strategies on one model and one batch.

    python benchmarks/step.py [--cfg digits_moco.yaml] [--steps 20] [override ...]
    python benchmarks/step.py --device cuda --sync-debug error --all-strategies   # GPU suite
    python benchmarks/step.py --quick --no-record                                # smoke (CI)

With ``--sync-debug error`` on CUDA the timed steps run under
``torch.cuda.set_sync_debug_mode("error")`` for every strategy whose documented host-sync count is
0 (tests/sync_table.py), and under "warn" for the others (MiOC's OC-SVM checks once per chunk).

Builds the run of ``--cfg`` once per strategy (same seed, so the same model and batch), then times
``engine.train_step`` past every strategy's warm-up, interleaving the strategies round by round so
that drift of the machine hits all of them alike. Prints a table (median and p90 step time, ratio
to ``none``) and appends it, with the machine and date, to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import negatives
from pretrain import config, engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from sync_table import STRATEGY_SYNCS  # noqa: E402

STRATEGIES = {
    "none": [],
    "mioc": ["negatives.name=mioc"],
    "mochi": ["negatives.name=mochi"],
}
DIGITS_KWARGS = {  # the digits configs' sizes, so that all of them run on the 256-key queue
    "mioc": ["negatives.kwargs={num_synthetic: 64, num_inlier_synthetic: 32}"],
    "mochi": ["negatives.kwargs={num_hard: 64, num_mix: 32, num_query_mix: 16}"],
    "modified_mochi": ["negatives.kwargs={num_hard: 64, num_mix: 32, num_query_mix: 16}"],
}
EXTRA_KWARGS = {"outliers": ["negatives.kwargs={ratio: 0.5}"]}  # rotations of the batch


def sync_mode(name: str, wanted: str) -> contextlib.AbstractContextManager:
    """``torch.cuda.set_sync_debug_mode`` for a strategy's timed steps (CUDA only)."""
    if wanted == "off" or not torch.cuda.is_available():
        return contextlib.nullcontext()
    mode = wanted if STRATEGY_SYNCS.get(name, ("?",))[0] == "0" else "warn"

    @contextlib.contextmanager
    def scope():  # noqa: ANN202
        before = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode(mode)
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(before)

    return scope()


def machine() -> str:
    cpu = "unknown CPU"
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return (f"{cpu}, {torch.get_num_threads()} threads, {dev}, torch {torch.__version__}, "
            f"python {platform.python_version()}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cfg", default="digits_moco.yaml")
    p.add_argument("--steps", type=int, default=20, help="timed steps per strategy")
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda if any")
    p.add_argument("--all-strategies", action="store_true", help="every registered strategy")
    p.add_argument("--sync-debug", choices=("off", "warn", "error"), default="off",
                   help="CUDA: torch.cuda.set_sync_debug_mode for the timed steps")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="3 steps after 1 warm-up (smoke)")
    p.add_argument("--results", default=str(Path(__file__).parent / "RESULTS.md"))
    p.add_argument("--no-record", action="store_true", help="print only")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    if args.quick:
        args.steps, args.warmup_steps = 3, 1
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device here")
    if device == "cpu":
        args.overrides = ["train.amp='off'", *args.overrides]  # a CPU run without CUDA autocast
    names = negatives.list_strategies() if args.all_strategies else list(STRATEGIES)

    runs, batches = {}, {}
    for name in names:
        extra = STRATEGIES.get(name, [f"negatives.name={name}"]) + EXTRA_KWARGS.get(name, [])
        sized = DIGITS_KWARGS.get(name, []) if args.cfg.startswith("digits") else []
        cfg = config.load(args.cfg, [*args.overrides, *extra, *sized, "out_dir=/tmp/negmine_bench"])
        run = engine.setup(cfg)
        if run.device.type != device:
            sys.exit(f"the run is on {run.device}, not {device}")
        run.moco.train()
        batch = next(iter(run.data.train_loader))  # (x1, x2, y, index[, stage-2 params])
        x1, x2, y, _, *rows = (t.to(run.device) for t in batch)
        batches[name] = (x1, x2, y, *rows)
        runs[name] = run
    epoch = 1e6  # past every warm-up
    times: dict[str, list[float]] = {n: [] for n in runs}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for r in range(args.warmup_steps + args.steps):
        for name, run in runs.items():
            x1, x2, y, *rows = batches[name]
            sync()
            tic = time.perf_counter()
            with sync_mode(name, args.sync_debug if r >= args.warmup_steps else "off"):
                engine.train_step(run, x1, x2, y, epoch, *rows)
            sync()
            if r >= args.warmup_steps:
                times[name].append(time.perf_counter() - tic)

    base = statistics.median(times["none"])
    rows = ["| strategy | median step (ms) | p90 (ms) | vs none |", "|---|---|---|---|"]
    for name, ts in times.items():
        med, p90 = statistics.median(ts), sorted(ts)[int(0.9 * (len(ts) - 1))]
        rows.append(f"| {name} | {1e3 * med:.1f} | {1e3 * p90:.1f} | {med / base:.3f}x |")
    cfg = runs["none"].cfg
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    debug = f"; sync debug mode {args.sync_debug}" if device == "cuda" else ""
    head = (f"\n### step time, {args.cfg} {' '.join(args.overrides)} "
            f"(batch {cfg.train.batch_size}, K {cfg.moco.queue_size}, {cfg.model.arch}, "
            f"augment_on {cfg.data.augment_on}), {datetime.date.today()}\n\n{machine()}; "
            f"{args.steps} steps after {args.warmup_steps} warm-up, strategies interleaved"
            f"{debug}; load: {load}\n\n")  # fmt: skip
    table = head + "\n".join(rows) + "\n"
    print(table)
    if args.no_record:
        return
    results = Path(args.results)
    if not results.exists():
        results.write_text("# Benchmark results\n\nAppended by the scripts in benchmarks/.\n")
    with results.open("a") as f:
        f.write(table)


if __name__ == "__main__":
    main()
