"""Linear evaluation with few labels: k labelled training images per class, several seeded draws
(MiOC §A.3: 10 to 1000 images per class).

Draw d of k images per class takes, in every class, the first k of a random order of that class
(a generator seeded by (seed, k, d)), so a draw is reproducible and independent of the others. A
count above the smallest class's size cannot be drawn and is skipped with a note. Each draw trains
the probe recipe (L-BFGS logistic regression by default) on the drawn features and tests on the
whole test set; the row reports mean ± standard deviation over draws and a bootstrap interval
(:mod:`linear_eval.records.summary`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from linear_eval.classify import logreg, probe
from linear_eval.records import summary
from pretrain.data.loaders import sample_seed

COUNTS = (10, 25, 50, 100, 250, 500, 1000)
DRAWS = 5


def draw(labels: torch.Tensor, per_class: int, seed: int) -> torch.Tensor:
    """Sorted indices (C · per_class,) of ``per_class`` random samples of every class."""
    if per_class < 1:
        raise ValueError(f"per_class must be >= 1, got {per_class}")
    _, counts = labels.unique(return_counts=True)
    if per_class > int(counts.min()):
        raise ValueError(
            f"cannot draw {per_class} per class: the smallest class has {int(counts.min())}"
        )
    rank = logreg.within_class_rank(labels, torch.Generator().manual_seed(seed))
    return torch.nonzero(rank < per_class).view(-1)


def evaluate(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    test_labels: torch.Tensor,
    num_classes: int,
    recipe: probe.Protocol,
    counts: Sequence[int] = COUNTS,
    draws: int = DRAWS,
    seed: int = 0,
) -> dict[str, Any]:
    """One row per drawable count: ``labels_per_class``, ``accuracies`` (one per draw) and the
    :func:`linear_eval.records.summary.accuracy` record; ``skipped`` lists the counts above the
    smallest class, ``note`` says why."""
    if draws < 1:
        raise ValueError(f"draws must be >= 1, got {draws}")
    smallest = int(train_labels.unique(return_counts=True)[1].min())
    rows, skipped = [], []
    for n in sorted(set(int(c) for c in counts)):
        if n > smallest:
            skipped.append(n)
            continue
        correct = []
        for d in range(draws):
            idx = draw(train_labels, n, sample_seed(seed, n, d, stream=4))
            scores, _ = probe.fit_predict(
                train_features[idx], train_labels[idx], test_features, num_classes, recipe, d
            )
            correct.append(summary.topk_correct(scores, test_labels, 1))
        rec = summary.accuracy(torch.stack(correct), "top1")
        rows.append({"labels_per_class": n, "accuracies": rec["top1_per_run"], **rec})
    out: dict[str, Any] = {
        "protocol": recipe.as_dict(),
        "draws": draws,
        "seed": seed,
        "smallest_class": smallest,
        "rows": rows,
        "skipped": skipped,
    }
    if skipped:
        out["note"] = (
            f"counts {skipped} skipped: above the smallest training class ({smallest} images)"
        )
    return out


def _draws(table: Mapping[Any, Sequence[float]] | Sequence[Mapping[str, Any]]) -> dict[int, list]:
    if isinstance(table, Mapping):
        return {int(n): [float(a) for a in accs] for n, accs in table.items()}
    draws: dict[int, list] = {}
    for row in table:
        if "labels_per_class" not in row or not ({"accuracy", "accuracies"} & set(row)):
            raise ValueError(f"a row needs labels_per_class and accuracy or accuracies: {row}")
        accs = row["accuracies"] if "accuracies" in row else [row["accuracy"]]
        draws.setdefault(int(row["labels_per_class"]), []).extend(float(a) for a in accs)
    return draws


def draws_summary(
    table: Mapping[Any, Sequence[float]] | Sequence[Mapping[str, Any]],
) -> dict[int, dict[str, float]]:
    """Mean ± sample std (ddof 1; 0 for one draw) of accuracy over draws per labels-per-class.

    ``table`` is {labels_per_class: [accuracy of each draw]} or rows
    {"labels_per_class": n, "accuracy": a} (one per draw) / {..., "accuracies": [a, ...]}.
    """
    draws = dict(sorted(_draws(table).items()))
    if not draws or any(n < 1 or not accs for n, accs in draws.items()):
        raise ValueError(f"need labels_per_class >= 1, each with >= 1 draw, got {draws}")
    out = {
        n: {
            "mean": float(np.mean(a)),
            "std": float(np.std(a, ddof=1)) if len(a) > 1 else 0.0,
            "draws": len(a),
        }
        for n, a in draws.items()
    }
    return out
