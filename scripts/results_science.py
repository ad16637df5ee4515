"""The CIFAR-10 section of the results page (``scripts/gen_results.py``): one row per arm of the
comparison ``benchmarks/science.py`` runs (``benchmarks/science_plan.py`` ``ARMS``), from the same
kept logs as the main table, "not run" until a lease has run it; beside them the published
figures, each with its setup; and MiOC minus its ablation as a paired bootstrap interval over the
test images (each run's ``per_sample`` results in ``eval/linear_eval.json``, resampled with the
same indices on both sides as ``python -m linear_eval table`` does).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.science_plan import ARMS, PAIR  # noqa: E402
from linear_eval.cli import table as eval_table  # noqa: E402
from pretrain import config  # noqa: E402

PAPER = ("MiOC paper (Jain et al. 2025, NLDL, PMLR 265; "
         "[`jain2025mioc`](references.md#jain2025mioc))")  # fmt: skip
PAPER_SETUP = "setup as in the paper, not restated here"
DEMO = ("MoCo CIFAR-10 demo (facebookresearch/moco, branch `colab-notebook`, "
        "`colab/moco_cifar10_demo.ipynb`)")  # fmt: skip
DEMO_SETUP = ("ResNet-18 (CIFAR variant), 200 epochs, batch 512, K 4096, T 0.1, m 0.99, 8 BN "
              "splits, cosine lr 0.06; kNN k 200, T 0.1 on the 128-d head; one GPU")  # fmt: skip
#: (source, method, kNN top-1, linear top-1, setup): the figures as published.
REFERENCES = (
    (PAPER, "MiOC", "-", "81.01", PAPER_SETUP),
    (PAPER, "MoCo v2", "-", "80.24", PAPER_SETUP),
    (PAPER, "MoCHi", "-", "79.98", PAPER_SETUP),
    (DEMO, "MoCo, asymmetric loss (the demo's default)", "82.6", "-", DEMO_SETUP),
    (DEMO, "MoCo, symmetric loss (`--symmetric`)", "85.3", "-", DEMO_SETUP),
)
KEYS = (("kNN", "knn_top1"), ("linear", "linear_top1"))


def arm_variant(variant: str) -> str:
    """A row's variant without its schedule (``train.epochs=N``: the epochs column says it)."""
    return " ".join(w for w in variant.split() if not w.startswith("train.epochs="))


def arm_rows(rows: list[Any]) -> dict[str, list[Any]]:
    """Each arm's measured rows (its recipe, its overrides; any schedule)."""
    return {arm: [r for r in rows if r.recipe == recipe and r.runs
                  and arm_variant(r.variant) == " ".join(sorted(over))]
            for arm, (recipe, over) in ARMS.items()}  # fmt: skip


def per_image(row: Any, key: str) -> list[np.ndarray]:
    """Each run's per-test-image correctness (empty where a run kept none)."""
    bits = [(r["eval"].get("per_sample") or {}).get(key) for r in row.runs]
    if not all(bits):
        return []
    return [np.frombuffer(b.encode(), np.uint8) == ord("1") for b in bits]


def difference(mioc: Any, queue: Any) -> str:
    """MiOC minus its ablation, kNN and linear: the seed-averaged paired bootstrap."""
    same = {str(r["eval"].get("test_set")) for r in mioc.runs + queue.runs}
    idx = eval_table.resampler(0)
    cells = []
    for label, key in KEYS:
        cell = eval_table.diff_cell(per_image(mioc, key), per_image(queue, key), idx,
                                    len(same) == 1)  # fmt: skip
        cells.append(f"{label} {cell}")
    return "; ".join(cells)


def section(rows: list[Any], name: Callable[[Any], str], cell: Callable[[str], str]) -> list[str]:
    """The section's lines: the arms' rows, the published figures, the paired difference."""
    out = [
        "## CIFAR-10: MiOC against MoCo at full length",
        "",
        "The arms of `benchmarks/science.py`, run side by side on one GPU. How: [the science "
        "plan](gpu_suite.md#the-science-plan). Each arm's runs are a row of the table above as "
        "well: seeds, wall time, hardware and kept logs. kNN (k 200, T 0.1) and linear top-1 by "
        "`python -m linear_eval` on the last checkpoint, on the 10,000 test images. An arm that "
        "has not run says **not run**.",
        "",
        *(
            ["<!-- not measured: no arm has run yet (every row says not run) -->"]
            if not any(arm_rows(rows).values())
            else []
        ),
        "| arm | recipe | epochs | seeds | kNN top-1 | linear top-1 | hardware | wall time | "
        "date | commit | log |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    measured = arm_rows(rows)
    for arm, (recipe, over) in ARMS.items():
        what = f"`{recipe}`" + (f" `{' '.join(over)}`" if over else "")
        if not measured[arm]:
            shipped = (config.CONFIG_DIR / recipe).is_file()
            epochs = str(config.load(recipe).train.epochs) if shipped else "-"
            knn = "not run" if shipped else "not run (recipe not shipped yet)"
            out.append(f"| {arm} | {cell(what)} | {epochs} | - | {knn} | not run | - | - | - | - "
                       "| - |")  # fmt: skip
            continue
        for r in measured[arm]:
            out.append("| " + " | ".join(cell(c) for c in (
                arm, name(r).split(" (ablation")[0], r.epochs, r.seeds, r.knn, r.linear,
                r.hardware, r.wall, r.date, r.commit, r.log)) + " |")  # fmt: skip
    out += [
        "",
        "Published figures (CIFAR-10, top-1 %), each with its setup:",
        "",
        "<!-- not measured: published figures, quoted from their sources -->",
        "| source | method | kNN top-1 | linear top-1 | setup |",
        "|---|---|---|---|---|",
    ]
    out += ["| " + " | ".join(ref) + " |" for ref in REFERENCES]
    mioc, queue = (measured[a] for a in PAIR)
    pairs = [(m, q) for m in mioc for q in queue if m.epochs == q.epochs and m.seeds == q.seeds]
    out += ["", f"**MiOC minus its ablation** (`{PAIR[0]}` − `{PAIR[1]}`, O = the whole queue; "
            "the seed-averaged accuracy's difference and its 95 % paired bootstrap interval over "
            "the test images, 1000 resamples with the same images on both sides; * = the "
            "interval excludes 0):"]  # fmt: skip
    if not pairs:
        out += ["", "- not run: both arms at the same epochs and seeds are needed."]
    for m, q in pairs:
        out += ["", f"- {m.epochs} epochs, seeds {m.seeds}, {m.hardware}: {difference(m, q)}"]
    return out
