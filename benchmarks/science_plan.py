"""The arms of the CIFAR-10 comparison (``benchmarks/science.py``) and its budget arithmetic: pure
functions of measured times, no processes, so that the decisions are tested on made-up numbers.

* ``ARMS``: arm -> (recipe, overrides). The comparison's order is its priority: when the arms do
  not all fit in the budget, the last ones are dropped first.
* ``decide``: which runs to stop now. Every live run's finish is estimated from its own epoch
  time measured while the others ran beside it (the GPU is shared: the step is host-bound and one
  run keeps it about 30 % busy, so the runs overlap, and each one's epoch time depends on how many
  run). When an estimate passes the budget, the last run in the order is stopped; the survivors
  are re-measured without it before the next drop. A run is never shortened: a run that cannot
  finish all its epochs is stopped and reported "not run: would need N s".
* ``plan_epochs``: the longest schedule (200, else 100 epochs) whose one run, alone, fits the
  budget at a measured speed (``newest_speed``: the newest cifar10_moco resident images/s in
  benchmarks/RESULTS.md, or a science record's). A shorter schedule chosen before the start is a
  complete run (its cosine ends at its last epoch, ``train.epochs=N``) and its row says its epochs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: arm -> (recipe, overrides), in the comparison's order (its priority when they do not all fit).
ARMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "moco": ("cifar10_moco.yaml", ()),
    "moco_sym": ("cifar10_moco_sym.yaml", ()),
    "mioc": ("cifar10_mioc.yaml", ()),
    "mioc_queue": ("cifar10_mioc.yaml", ("negatives.kwargs.selection=queue",)),
}
#: The same comparison on digits (``--quick``, a CPU): what runs in the test suite.
QUICK_ARMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "moco": ("digits_moco.yaml", ()),
    "mioc": ("digits_mioc.yaml", ()),
    "mioc_queue": ("digits_mioc.yaml", ("negatives.kwargs.selection=queue",)),
}
#: The pair whose paired bootstrap difference the comparison reports (MiOC minus its ablation).
PAIR = ("mioc", "mioc_queue")
SCHEDULES = (200, 100)  # the schedules plan_epochs chooses from, longest first
CIFAR_TRAIN, CIFAR_TEST = 50_000, 10_000
#: A forward pass of the kNN monitor costs about a third of a training step's image (one forward
#: of one view against two forwards and a backward).
MONITOR_SHARE = 1 / 3
SETUP_S = 30.0  # start-up before the first step: imports, the resident set's decode, compiling


@dataclass(frozen=True)
class Timing:
    """One live run as measured: ``done`` of ``total`` epochs logged; ``epoch_s`` the seconds per
    epoch (the gap between epoch records, its kNN monitor included) measured while the runs now
    live ran, or None when not yet measured so (its first epoch, or just after a drop)."""

    name: str
    done: int
    total: int
    epoch_s: float | None


def need_s(t: Timing, now: float, eval_s: float) -> float | None:
    """Seconds from the comparison's start that the run needs to finish its epochs and its
    evaluation (None: not measured)."""
    if t.epoch_s is None:
        return None
    return now + (t.total - t.done) * t.epoch_s + eval_s


def decide(live: list[Timing], now: float, budget: float, eval_s: float) -> dict[str, float]:
    """The runs to stop now, each with the seconds it would need (from the start) at its
    measured speed.

    ``live``: the runs still training, in priority order. Nothing is decided while a run is not
    measured. When every estimate fits in ``budget``, none; else the last run of the order (also
    when its own estimate fits: it makes room for the runs before it): one at a time, since the
    survivors speed up without it and are re-measured before the next drop.
    """
    needs = [need_s(t, now, eval_s) for t in live]
    if not live or any(n is None for n in needs):
        return {}
    if all(n is not None and n <= budget for n in needs):
        return {}
    need = needs[-1]
    assert need is not None
    return {live[-1].name: need}


def not_run(need: float | None, budget: float) -> str:
    """What a stopped run reports: never a result, the seconds it would have needed."""
    if need is None:
        return "not run: stopped before its epochs were timed"
    if need <= budget:
        return (f"not run: would need {need:.0f} s beside the runs before it, which did not fit "
                f"in {budget:.0f} s with it")  # fmt: skip
    return f"not run: would need {need:.0f} s"


def over_time(live: list[Timing], now: float, eval_s: float) -> dict[str, float | None]:
    """At the budget's end: every run still live is stopped; its need as last estimated."""
    return {t.name: need_s(t, now, eval_s) for t in live}


def epoch_s(images_per_s: float, train: int = CIFAR_TRAIN, test: int = CIFAR_TEST) -> float:
    """One epoch's seconds at a training speed: the steps plus the kNN monitor's forward pass
    over the training and test images (``MONITOR_SHARE`` of a step's cost per image)."""
    return train / images_per_s + MONITOR_SHARE * (train + test) / images_per_s


def plan_epochs(
    images_per_s: float, budget: float, eval_s: float, schedules: tuple[int, ...] = SCHEDULES
) -> int | None:
    """The longest schedule whose one run, alone at ``images_per_s``, fits ``budget`` with its
    set-up and evaluation; None when none does."""
    for n in schedules:
        if SETUP_S + n * epoch_s(images_per_s) + eval_s <= budget:
            return n
    return None


#: benchmarks/train.py's per-epoch row of the resident MoCo run: | moco_resident | 1 | 6.2 | 14592 |
TRAIN_ROW = re.compile(r"^\| moco_resident \| \d+ \| [\d.]+ \| (\d+(?:\.\d+)?) \|", re.M)
#: science.py's row of the moco arm: | moco_s0 | 100 | 9 min 10 s | 14000 | ...
SCIENCE_ROW = re.compile(r"^\| moco(?:_s\d+)? \| \d+ \| [^|]+ \| (\d+(?:\.\d+)?) \|", re.M)


def newest_speed(results: str) -> tuple[float, str] | None:
    """The newest cifar10_moco images/s recorded in a results file (benchmarks/RESULTS.md): the
    last resident MoCo row of a training-run table or a science table, with its section's title."""
    best: tuple[int, float] | None = None
    for pattern in (TRAIN_ROW, SCIENCE_ROW):
        for m in pattern.finditer(results):
            if best is None or m.start() > best[0]:
                best = (m.start(), float(m.group(1)))
    if best is None:
        return None
    titles = [m for m in re.finditer(r"^## .*$", results, re.M) if m.start() < best[0]]
    return best[1], titles[-1].group(0)[3:] if titles else "no section title"
