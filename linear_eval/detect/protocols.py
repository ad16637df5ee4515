"""OOD and anomaly-detection protocols on frozen features: one-class and ID-vs-OOD datasets.

- One-class (FIRM / CSI protocol): each normal set in turn is ID; the bank is the training
  features of its classes, ID = its test images, OOD = every other test image; the detector's
  metrics are averaged over the normal sets. A normal set is one class (each class in turn), or,
  for a checkpoint trained on ``data.in_classes``, that one set of classes.
- ID vs OOD datasets (CIDER / KNN+ protocol): the bank is the ID training features, ID = the ID
  test set, OOD = each other dataset in turn; metrics per OOD set and their mean.

Every AUROC carries a bootstrap 95% interval (:mod:`linear_eval.records.summary`): per pair the ID
and OOD scores are resampled independently; a mean over pairs resamples every pair and averages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from linear_eval.detect import detectors
from linear_eval.detect.detectors import DEFAULT_SETTINGS, Settings, ViewSet
from linear_eval.records import summary

MEAN_KEYS = ("aupr_in", "aupr_out", "fpr95", "fpr95_closest")


def _usable(names: Sequence[str], bank: ViewSet, test: ViewSet) -> tuple[list[str], dict]:
    skipped = {n: why for n in names if (why := detectors.unavailable(n, bank, test))}
    return [n for n in names if n not in skipped], skipped


def _mean_record(pairs: list[tuple[torch.Tensor, torch.Tensor]], records: list[dict]) -> dict:
    out = summary.mean_auroc(pairs)
    out.update({k: float(np.mean([r[k] for r in records])) for k in MEAN_KEYS})
    return out


def one_class(
    bank: ViewSet,
    test: ViewSet,
    normal_sets: Sequence[Sequence[int]],
    names: Sequence[str] = detectors.DEFAULT,
    settings: Settings = DEFAULT_SETTINGS,
) -> dict[str, Any]:
    """One-class protocol; ``bank`` and ``test`` hold all classes (labels in ``.plain.labels``).

    Returns:
        ``{"normal_sets", "detectors": {name: {"mean": {...}, "per_set": {"3": record}}},
        "skipped": {name: reason}}``; a record is :func:`linear_eval.records.summary.detection`.
    """
    usable, skipped = _usable(list(names), bank, test)
    per: dict[str, dict[str, Any]] = {n: {} for n in usable}
    pairs: dict[str, list] = {n: [] for n in usable}
    for normal in normal_sets:  # one bank per normal set (a handful), never per sample
        classes = torch.as_tensor(list(normal))
        in_bank = torch.isin(bank.plain.labels, classes)
        is_id = torch.isin(test.plain.labels, classes)
        if not in_bank.any() or not is_id.any() or is_id.all():
            raise ValueError(
                f"normal set {list(normal)} needs training images, ID test images and OOD test "
                "images"
            )
        sub = bank.subset(in_bank)
        key = ",".join(str(c) for c in normal)
        for n in usable:
            s = detectors.score(n, sub, test, settings)
            pairs[n].append((s[is_id], s[~is_id]))
            per[n][key] = summary.detection(s[is_id], s[~is_id])
    return {
        "normal_sets": [list(map(int, s)) for s in normal_sets],
        "settings": detectors.settings_dict(settings),
        "detectors": {
            n: {"mean": _mean_record(pairs[n], list(per[n].values())), "per_set": per[n]}
            for n in usable
        },
        "skipped": skipped,
    }


def id_vs_ood(
    bank: ViewSet,
    id_test: ViewSet,
    ood_sets: Mapping[str, ViewSet],
    names: Sequence[str] = detectors.DEFAULT,
    settings: Settings = DEFAULT_SETTINGS,
) -> dict[str, Any]:
    """ID-vs-OOD-datasets protocol.

    Returns:
        ``{"detectors": {name: {"mean": {...}, "per_set": {ood_name: record}}}, "skipped"}``.
    """
    if not ood_sets:
        raise ValueError("give at least one OOD dataset")
    usable, skipped = _usable(list(names), bank, id_test)
    for name, feats in ood_sets.items():
        for n in list(usable):
            why = detectors.unavailable(n, bank, feats)
            if why:
                usable.remove(n)
                skipped[n] = f"{why} ({name})"
    out: dict[str, Any] = {}
    for n in usable:
        scorer = detectors.fit(n, bank, settings)  # once per bank, not once per OOD set
        s_id = scorer(id_test)
        per, pairs = {}, []
        for name, feats in ood_sets.items():
            s_ood = scorer(feats)
            per[name] = summary.detection(s_id, s_ood)
            pairs.append((s_id, s_ood))
        out[n] = {"mean": _mean_record(pairs, list(per.values())), "per_set": per}
    return {
        "ood_sets": list(ood_sets),
        "settings": detectors.settings_dict(settings),
        "detectors": out,
        "skipped": skipped,
    }
