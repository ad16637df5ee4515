"""Benchmark: throughput quiet vs beside a competing CPU-bound process, at the thread rule's count
(pretrain/runtime/threads.py) and at torch's default (one thread per core).

    python benchmarks/threads.py [--quick] [--results PATH] [--no-record] [--device cpu]

Workloads: the OC-SVM (fit on 256 points + scoring a 65,536-key queue; scikit-learn on the same
data beside it) and one digits training step (``digits_moco.yaml``). "loaded" runs one busy-loop
process per ``--competitors`` (default 1) pinned to the same cores, started before and stopped
after the timing. Quiet and loaded rounds are interleaved (quiet, loaded, quiet, ...), each
setting timed by its median. Targets (issue 14): loaded >= 0.5x quiet for each workload at the
rule's count; the OC-SVM >= 3x scikit-learn under the same load.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.results_md import record_table  # noqa: E402
from negmine_core.step import Batch  # noqa: E402
from pretrain import config  # noqa: E402
from pretrain.engine import loop  # noqa: E402
from pretrain.runtime import cores, threads  # noqa: E402


def busy(stop: mp.synchronize.Event) -> None:  # type: ignore[name-defined]
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


class Load:
    """``n`` busy-loop processes on this process's cores while the context is open."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __enter__(self) -> Load:
        ctx = mp.get_context("fork")
        self.stop = ctx.Event()
        self.procs = [
            ctx.Process(target=busy, args=(self.stop,), daemon=True) for _ in range(self.n)
        ]
        for p in self.procs:
            p.start()
        time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for p in self.procs:
            p.join(5)


def ocsvm_work(quick: bool):
    from sklearn.svm import OneClassSVM as Sk

    from negatives.ocsvm.svm import OneClassSVM
    from pretrain.testing.fakedata import embeddings

    X, Q = embeddings(256, 8192 if quick else 65536, seed=256)

    def ours() -> None:
        OneClassSVM(nu=0.01, gamma=0.01).fit(X).decision_function(Q)

    def sklearn() -> None:
        Sk(nu=0.01, gamma=0.01).fit(X.numpy()).decision_function(Q.numpy())

    return {"ocsvm fit+score (torch)": ours, "ocsvm fit+score (scikit-learn)": sklearn}


def step_work(quick: bool, device: str):
    over = ["out_dir=/tmp/negmine_bench_threads", "data.num_workers=0", "train.progress_bar=false"]
    if quick:
        over += ["model.width=8", "train.batch_size=32", "moco.queue_size=64"]
    cfg = config.load("digits_moco.yaml", over)
    run = loop.setup(cfg)
    x1, x2, y, _, *rows = next(iter(run.data.train_loader))  # rows: stage-2 parameters
    x1, x2, y, *rows = (t.to(run.device) for t in (x1, x2, y, *rows))
    run.moco.train()

    def step() -> None:
        loop.train_step(run, Batch.make(x1, x2, y, rows), 1.0)
        if run.device.type == "cuda":
            torch.cuda.synchronize()

    return {"digits train step": step}


def median_ms(f, repeats: int) -> float:
    f()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        times.append(1e3 * (time.perf_counter() - t))
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, few repeats (CI)")
    p.add_argument("--results", default=str(Path(__file__).with_name("RESULTS.md")))
    p.add_argument("--no-record", action="store_true", help="print only")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--competitors", type=int, default=1, help="busy-loop processes when loaded")
    p.add_argument("--rounds", type=int, default=0, help="interleaved quiet/loaded rounds")
    args = p.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    repeats = 3 if args.quick else 7
    work = {**ocsvm_work(args.quick), **step_work(args.quick, args.device)}
    rule = threads.intra_op_threads()
    counts = sorted({rule, cores.per_rank()})
    t: dict[tuple[str, int, str], list[float]] = {}
    for _ in range(rounds):
        for load in ("quiet", "loaded"):
            ctx = Load(args.competitors) if load == "loaded" else Load(0)
            with ctx:
                for n in counts:
                    torch.set_num_threads(n)
                    for name, f in work.items():
                        if "scikit" in name and n != counts[0]:
                            continue  # libsvm is single-threaded: one column is enough
                        t.setdefault((name, n, load), []).append(median_ms(f, repeats))
    rows = ["| workload | torch threads | quiet ms | loaded ms | loaded / quiet throughput |"]
    rows.append("|---|---|---|---|---|")
    ms = {k: statistics.median(v) for k, v in t.items()}
    for name, n, _ in sorted(k for k in ms if k[2] == "quiet"):
        q, ld = ms[name, n, "quiet"], ms[name, n, "loaded"]
        tag = f"{n} (rule)" if n == rule else f"{n}"
        rows.append(f"| {name} | {tag} | {q:.1f} | {ld:.1f} | {q / ld:.2f}x |")
    ours = ms["ocsvm fit+score (torch)", rule, "loaded"]
    sk = ms["ocsvm fit+score (scikit-learn)", counts[0], "loaded"]
    notes = [
        f"- cores available to this rank: {cores.per_rank()} (affinity {cores.available()}); "
        f"rule's threads: {rule}; competitors: {args.competitors} busy loop(s); rounds {rounds}",
        f"- OC-SVM under load at the rule's threads: {sk / ours:.1f}x scikit-learn (target >= 3x)",
        "- targets: loaded/quiet >= 0.5x at the rule's thread count",
    ]
    title = f"Threads under load ({args.device}{', quick' if args.quick else ''})"
    record_table(title, rows + [""] + notes, args.results, not args.no_record, args.device)


if __name__ == "__main__":
    main()
