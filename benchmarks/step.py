"""Training-step time of the negative strategies on one model and one batch.

    python benchmarks/step.py [--cfg digits_moco.yaml] [--steps 20] [override ...]

Builds the run of ``--cfg`` once per strategy (same seed, so the same model and batch), then times
``engine.train_step`` past every strategy's warm-up, interleaving the strategies round by round so
that drift of the machine hits all of them alike. Prints a table (median and p90 step time, ratio
to ``none``) and appends it, with the machine and date, to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import time
from pathlib import Path

import torch

from pretrain import config, engine

STRATEGIES = {
    "none": [],
    "mioc": ["negatives.name=mioc"],
    "mochi": ["negatives.name=mochi"],
}
DIGITS_KWARGS = {  # the digits configs' sizes, so that all three run on the 256-key queue
    "mioc": ["negatives.kwargs={num_synthetic: 64, num_inlier_synthetic: 32}"],
    "mochi": ["negatives.kwargs={num_hard: 64, num_mix: 32, num_query_mix: 16}"],
}


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
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()

    runs, batches = {}, {}
    for name, extra in STRATEGIES.items():
        sized = DIGITS_KWARGS.get(name, []) if args.cfg.startswith("digits") else []
        cfg = config.load(args.cfg, [*args.overrides, *extra, *sized, "out_dir=/tmp/negmine_bench"])
        run = engine.setup(cfg)
        run.moco.train()
        x1, x2, y, _ = next(iter(run.data.train_loader))
        batches[name] = tuple(t.to(run.device) for t in (x1, x2, y))
        runs[name] = run
    epoch = 1e6  # past every warm-up
    times: dict[str, list[float]] = {n: [] for n in runs}
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for r in range(args.warmup_steps + args.steps):
        for name, run in runs.items():
            sync()
            tic = time.perf_counter()
            engine.train_step(run, *batches[name], epoch)
            sync()
            if r >= args.warmup_steps:
                times[name].append(time.perf_counter() - tic)

    base = statistics.median(times["none"])
    rows = ["| strategy | median step (ms) | p90 (ms) | vs none |", "|---|---|---|---|"]
    for name, ts in times.items():
        med, p90 = statistics.median(ts), sorted(ts)[int(0.9 * (len(ts) - 1))]
        rows.append(f"| {name} | {1e3 * med:.1f} | {1e3 * p90:.1f} | {med / base:.3f}x |")
    cfg = runs["none"].cfg
    head = (f"\n### step time, {args.cfg} {' '.join(args.overrides)} "
            f"(batch {cfg.train.batch_size}, K {cfg.moco.queue_size}, {cfg.model.arch}), "
            f"{datetime.date.today()}\n\n{machine()}; {args.steps} steps after "
            f"{args.warmup_steps} warm-up, strategies interleaved.\n\n")  # fmt: skip
    table = head + "\n".join(rows) + "\n"
    print(table)
    results = Path(__file__).parent / "RESULTS.md"
    if not results.exists():
        results.write_text("# Benchmark results\n\nAppended by the scripts in benchmarks/.\n")
    with results.open("a") as f:
        f.write(table)


if __name__ == "__main__":
    main()
