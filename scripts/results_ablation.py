"""MiOC against its ablation (O = the whole queue), stated: the sentence the results page and the
MiOC recipe page carry under their tables (``scripts/gen_results.py``).

Per dataset with both arms measured (the same seeds): MiOC minus the ablation as the seed-averaged
paired bootstrap over the test images (:func:`results_science.difference`, the resampling of
``python -m linear_eval table``), "no measurable difference" when the kNN interval holds 0; and
the share of the queue MiOC's OC-SVM kept in O (``neg_inlier_fraction``, logged every
``train.log_every`` steps after the warm-up), its median over the MiOC runs' logged steps. A
dataset whose pair has not run says "not run".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import results_science

#: (dataset label, MiOC recipe, what to say while it has not run).
DATASETS = (
    ("digits", "digits_mioc.yaml", "not run"),
    ("CIFAR-10", "cifar10_mioc.yaml", "not run (the [science plan](gpu_suite.md#the-science-plan) "
     "runs it)"),
)  # fmt: skip
MIOC = {recipe for _, recipe, _ in DATASETS}
ABLATION = "negatives.kwargs.selection=queue"
SHARE_KEY = "neg_inlier_fraction"


def o_share(runs: list[dict[str, Any]]) -> float | None:
    """The median share of the queue in O over every logged step of the runs (None: none)."""
    shares = [s[SHARE_KEY] for r in runs for s in r["steps"] if SHARE_KEY in s]
    return float(np.median(shares)) if shares else None


def pair(rows: list[Any], recipe: str) -> tuple[Any, Any] | None:
    """MiOC's row and its ablation's, measured with the same seeds (None: not both)."""
    mine = [r for r in rows if r.recipe == recipe and r.runs]
    plain = [r for r in mine if r.variant == ""]
    queue = [r for r in mine if r.variant == ABLATION]
    both = [(m, q) for m in plain for q in queue if m.seeds == q.seeds and m.epochs == q.epochs]
    return both[0] if both else None


def verdict(diff: str) -> str:
    """ "no measurable difference" unless the kNN interval excludes 0 (its cell's ``*``)."""
    knn = diff.split(";")[0]
    return "a difference" if knn.endswith("*") else "no measurable difference"


def statement(rows: list[Any], link_prefix: str = "") -> list[str]:
    """The lines that state MiOC against its ablation, one per dataset."""
    out = ["**MiOC against its ablation** (O = the whole queue; MiOC − ablation, the "
           "seed-averaged top-1 difference and its 95 % paired bootstrap interval over the test "
           "images, * = the interval excludes 0; O's share: the median over the MiOC runs' "
           f"logged steps of `{SHARE_KEY}`):", ""]  # fmt: skip
    for label, recipe, missing in DATASETS:
        found = pair(rows, recipe)
        if found is None:
            out.append(f"- {label}: {missing.replace('](', f']({link_prefix}')}.")
            continue
        mioc, queue = found
        diff = results_science.difference(mioc, queue)
        share = o_share(mioc.runs)
        where = "not logged" if share is None else f"a median {share:.0%} of the queue"
        out.append(f"- {label} (seeds {mioc.seeds}, {mioc.epochs} epochs): "
                   f"{verdict(diff)}: {diff}; O was {where}.")  # fmt: skip
    return out
