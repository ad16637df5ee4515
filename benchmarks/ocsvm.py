"""Benchmark: the torch OneClassSVM against scikit-learn (and thundersvm-cpu if installed).

    python benchmarks/ocsvm.py [--quick] [--device cpu|cuda] [--results PATH] [--no-record]

Times ``fit`` on n embedding-like points (cat(q, k) of n / 2 unit vectors in d = 128) and
``decision_function`` on queues of 4096 / 16384 / 65536 keys, at MiOC's (nu, gamma) = (0.01, 0.01):
the median of several repeats after a warm-up. Prints a table and appends it, with the machine and
the date, to benchmarks/RESULTS.md (or ``--results``). ``--quick``: n = 256 and 1024 only, 3
repeats (a smoke run). ``--device cuda`` times the torch path on the GPU too, with
torch.cuda.synchronize() around each call, and checks the GPU targets: fit of 256 points <= 2 ms,
scoring 65,536 keys <= 1 ms.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.svm import OneClassSVM as SkOneClassSVM

from negatives.ocsvm import OneClassSVM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fakedata import embeddings  # noqa: E402  (the tests' generator: one data recipe)

NU, GAMMA, D = 0.01, 0.01, 128
QUEUES = (4096, 16384, 65536)
RESULTS = Path(__file__).with_name("RESULTS.md")


def timed_ms(sync, f, *args):
    if sync:
        sync()
    t = time.perf_counter()
    f(*args)
    if sync:
        sync()
    return 1e3 * (time.perf_counter() - t)


class Sklearn:
    name, device, sync = "scikit-learn", "cpu", None

    def fit(self, X):
        return SkOneClassSVM(nu=NU, gamma=GAMMA).fit(X.numpy())  # float32, as MiOC passes it

    def score(self, m, Q):
        return m.decision_function(Q.numpy())  # float64 conversion included, as a caller pays it


class Torch:
    def __init__(self, device="cpu"):
        self.device, self.name = device, f"torch ({device})"
        self.sync = torch.cuda.synchronize if device == "cuda" else None

    def fit(self, X):
        return OneClassSVM(nu=NU, gamma=GAMMA).fit(X)

    def score(self, m, Q):
        return m.decision_function(Q)


class ThunderSVM:
    name, device, sync = "thundersvm-cpu", "cpu", None

    def fit(self, X):
        return OneClassSVM(nu=NU, gamma=GAMMA, backend="thundersvm").fit(X)

    def score(self, m, Q):
        return m.decision_function(Q)


def machine():
    cpu = platform.processor() or "?"
    if os.path.exists("/proc/cpuinfo"):
        names = [ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if "model name" in ln]
        cpu = names[0] if names else cpu
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    return (
        f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} "
        f"threads), numpy {np.__version__}, {gpu}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 256 and 1024, 3 repeats")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="cuda: also time the GPU, check its targets")  # fmt: skip
    parser.add_argument("--results", default=str(RESULTS))
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device here")
    sizes = (256, 1024) if args.quick else (256, 1024, 4096, 16384)
    if args.quick:
        args.repeats = 3
    impls = [Sklearn(), Torch()]
    try:
        import thundersvm  # noqa: F401

        impls.append(ThunderSVM())
    except ImportError:
        pass
    if device == "cuda":
        impls.append(Torch("cuda"))
    header = "| n fit | implementation | n_iter | n_SV | fit ms | " + " | ".join(
        f"score {q} ms" for q in QUEUES
    )
    rows, ms = [header + " |", "|" + "---|" * (5 + len(QUEUES))], {}
    for n in sizes:
        X, Q = embeddings(n, max(QUEUES), seed=n)
        data = {impl.name: (X.to(impl.device), Q.to(impl.device)) for impl in impls}
        models = {impl.name: impl.fit(data[impl.name][0]) for impl in impls}  # and warm-up
        times = {(impl.name, what): [] for impl in impls for what in ("fit",) + QUEUES}
        for _ in range(max(3, args.repeats * 256 // n)):  # interleaved: drift hits all alike
            for impl in impls:
                Xd, Qd = data[impl.name]
                m = models[impl.name]
                times[impl.name, "fit"].append(timed_ms(impl.sync, impl.fit, Xd))
                for q in QUEUES:
                    times[impl.name, q].append(timed_ms(impl.sync, impl.score, m, Qd[:q]))
        for impl in impls:
            fit, *score = (statistics.median(times[impl.name, w]) for w in ("fit",) + QUEUES)
            ms[n, impl.name] = (fit, score[-1])
            m = models[impl.name]
            cells = [f"{fit:.2f}"] + [f"{t:.2f}" for t in score]
            rows.append(
                f"| {n} | {impl.name} | {m.n_iter_} | {len(m.support_)} | "
                + " | ".join(cells)
                + " |"
            )
            print(rows[-1], flush=True)
    sk, ours = ms[256, "scikit-learn"], ms[256, "torch (cpu)"]
    targets = [
        f"- fit + score 65536 at n = 256: scikit-learn {sum(sk):.1f} ms, torch {sum(ours):.1f} ms, "
        f"speed-up {sum(sk) / sum(ours):.1f}x (target >= 8x)",
        f"- fit alone at n = 256: torch / scikit-learn = {ours[0] / sk[0]:.2f} (target <= 2.5)",
    ]
    if device == "cuda":
        fit, score = ms[256, "torch (cuda)"]
        targets += [
            f"- GPU fit of 256 points: {fit:.3f} ms (target <= 2 ms): "
            + ("met" if fit <= 2 else "NOT met"),
            f"- GPU scoring of 65,536 keys: {score:.3f} ms (target <= 1 ms): "
            + ("met" if score <= 1 else "NOT met"),
        ]
    stamp = datetime.datetime.now().isoformat(timespec="seconds")
    text = "\n".join(
        [f"\n## OC-SVM fit and scoring, (nu, gamma) = ({NU}, {GAMMA}), {stamp}", "", machine(), ""]
        + rows
        + [""]
        + targets
    )
    print(text)
    if args.no_record:
        return
    results = Path(args.results)
    if not results.exists():
        results.write_text("# Benchmark results (appended by the scripts in benchmarks/)\n")
    with results.open("a") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
