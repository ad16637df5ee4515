"""Detectors fitted once per bank vs refitted per test set (issue 16, item 6): ID-vs-OOD with 4 OOD
sets, "today" = ``detectors.score`` per set (1 + 4 fits, what ``id_vs_ood`` did before), "after" =
``detectors.fit`` once then the scorer on the 5 sets. Seconds per detector, interleaved rounds.

    python benchmarks/detectors.py [--quick] [--results benchmarks/RESULTS.md] [--no-record]
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
from linear_eval.detect import detectors  # noqa: E402
from linear_eval.detect.detectors import DEFAULT_SETTINGS, ViewSet  # noqa: E402
from linear_eval.inputs.features import Features  # noqa: E402

RESULTS = Path(__file__).with_name("RESULTS.md")
NAMES = ("maha_tied", "maha_per_class", "ocsvm", "knn+", "s_con")


def feats(n: int, dim: int, seed: int, shift: float = 0.0, classes: int = 10) -> ViewSet:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g) + shift
    head = torch.nn.functional.normalize(torch.randn(n, 8, generator=g), dim=1)
    return ViewSet(Features(x, head, torch.arange(n) % classes))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--bank", type=int, default=5000)
    p.add_argument("--test", type=int, default=2000)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--results", default=str(RESULTS))
    p.add_argument("--no-record", action="store_true")
    a = p.parse_args()
    if a.quick:
        a.bank, a.test, a.dim, a.rounds = 300, 100, 32, 1
    bank, id_test = feats(a.bank, a.dim, 0), feats(a.test, a.dim, 1)
    sets = [id_test] + [feats(a.test, a.dim, s, shift=0.3) for s in range(2, 6)]
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(a.rounds):
        for name in NAMES:
            t = time.perf_counter()
            today = [detectors.score(name, bank, s, DEFAULT_SETTINGS) for s in sets]
            times.setdefault((name, "today"), []).append(time.perf_counter() - t)
            t = time.perf_counter()
            scorer = detectors.fit(name, bank, DEFAULT_SETTINGS)
            after = [scorer(s) for s in sets]
            times.setdefault((name, "after"), []).append(time.perf_counter() - t)
            assert all(torch.equal(x, y) for x, y in zip(today, after, strict=True)), name
    rows = [
        f"bank {a.bank} x {a.dim}, ID test {a.test}, 4 OOD sets of {a.test}; median of "
        f"{a.rounds} interleaved rounds; scores equal between the two paths",
        "",
        "| detector | today: refit per set (s) | after: fit once (s) | speed-up |",
        "|---|---|---|---|",
    ]
    for name in NAMES:
        old = statistics.median(times[name, "today"])
        new = statistics.median(times[name, "after"])
        rows.append(f"| {name} | {old:.3f} | {new:.3f} | {old / new:.2f}x |")
        print(rows[-1], flush=True)
    record_table("Detectors: fit once per bank vs refit per OOD set", rows, a.results,
                 not a.no_record, "cpu")  # fmt: skip


if __name__ == "__main__":
    main()
