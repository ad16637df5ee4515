"""The detection evaluations of checkpoints: one-class, ID vs OOD datasets, AULC over checkpoints,
and the paired one-class comparison. Each writes ``RUN/eval/<evaluator>.json`` and returns the
record; the figures are drawn by the command line and the report (the kappa analyses, which also
use a classifier and draw, are :mod:`linear_eval.cli.kappa`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from linear_eval.detect import detectors, protocols, scores
from linear_eval.detect.detectors import DEFAULT_SETTINGS, Settings
from linear_eval.inputs.session import Session
from linear_eval.records import summary

# the CIFAR-10 OOD benchmark of Ming et al. 2023 (CIDER) and Sun et al. 2022 (KNN+)
CIFAR10_OOD = ("svhn", "lsun", "isun", "textures", "places365", "cifar100")
AULC_DETECTORS = ("s_con", "s_center", "knn+", "maha_tied", "kde")


def _views_needed(names: Sequence[str], crops: int) -> tuple[bool, int]:
    rotations = "s_shift" in names or "s_ens" in names
    return rotations, crops if "s_ens" in names else 0


def run_one_class(
    sess: Session,
    names: Sequence[str] = detectors.DEFAULT,
    settings: Settings = DEFAULT_SETTINGS,
    crops: int = 10,
    write: bool = True,
) -> dict[str, Any]:
    """One-class protocol over every class (or the run's ``data.in_classes``); its figure:
    :func:`linear_eval.report.document.draw_one_class`."""
    names = detectors.check(list(names))
    rotations, n_crops = _views_needed(names, crops)
    bank = sess.view_set("train", rotations=rotations)
    test = sess.view_set("test", rotations=rotations, crops=n_crops, crop_seed=settings.seed)
    record = protocols.one_class(bank, test, sess.normal_sets(), names, settings)
    record["crops"] = n_crops
    if write:
        sess.write("oneclass", record)
    return record


def run_ood_datasets(
    sess: Session,
    ood_names: Sequence[str] | None = None,
    names: Sequence[str] = detectors.DEFAULT,
    settings: Settings = DEFAULT_SETTINGS,
    crops: int = 10,
) -> dict[str, Any]:
    """The run's test set (its ``in_classes`` when set) against each OOD dataset's test split,
    read at the run's resolution; every dataset is opened before any extraction."""
    names = detectors.check(list(names))
    if not ood_names:
        if sess.model.cfg.data.name != "cifar10":
            raise ValueError(
                "--ood-datasets is required unless the run's dataset is cifar10 (whose default "
                f"list is {', '.join(CIFAR10_OOD)})"
            )
        ood_names = CIFAR10_OOD
    for name in ood_names:
        sess.store.dataset(name, "test")
    rotations, n_crops = _views_needed(names, crops)
    bank = sess.view_set("train", rotations=rotations)
    test = sess.view_set("test", rotations=rotations, crops=n_crops, crop_seed=settings.seed)
    own = sess.model.cfg.data.in_classes
    if own:
        classes = torch.as_tensor(own)
        bank = bank.subset(torch.isin(bank.plain.labels, classes))
        test = test.subset(torch.isin(test.plain.labels, classes))
    ood_sets = {
        n: sess.view_set("test", rotations, n_crops, settings.seed, dataset=n) for n in ood_names
    }
    record = protocols.id_vs_ood(bank, test, ood_sets, names, settings)
    record["crops"] = n_crops
    sess.write("ood", record)
    return record


def run_aulc(
    sessions: Sequence[Session],
    names: Sequence[str] = AULC_DETECTORS,
    settings: Settings = DEFAULT_SETTINGS,
) -> dict[str, Any]:
    """One-class mean AUROC of each checkpoint (sorted by global step) and the normalised area
    under that curve, ``scores.aulc``; written next to the last checkpoint."""
    if len(sessions) < 2:
        raise ValueError("AULC needs at least two checkpoints (--ckpt A --ckpt B, or a glob)")
    ordered = sorted(sessions, key=lambda s: s.model.global_step)
    steps = [s.model.global_step for s in ordered]
    if len(set(steps)) != len(steps):
        raise ValueError(f"checkpoints must be at distinct global steps, got {steps}")
    curves: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for s in ordered:
        rec = run_one_class(s, names, settings, crops=0, write=False)
        for n in names:
            if n in rec["detectors"]:
                curves[n].append(
                    {"global_step": s.model.global_step, "epoch": s.model.epoch}
                    | rec["detectors"][n]["mean"]
                )
    out = {
        n: {
            "aulc": scores.aulc([p["global_step"] for p in pts], [p["auroc"] for p in pts]),
            "points": pts,
        }
        for n, pts in curves.items()
        if len(pts) == len(ordered)
    }
    record = {"checkpoints": [str(s.model.ckpt) for s in ordered], "detectors": out}
    ordered[-1].write("aulc", record)
    return record


def compare_one_class(a: Session, b: Session, k: int = 5) -> dict[str, Any]:
    """Mean one-class s_con AUROC of B minus A (A the reference), paired bootstrap over the same
    resamples."""
    settings = Settings(k=k)
    pairs: dict[str, list] = {"a": [], "b": []}
    for tag, s in (("a", a), ("b", b)):
        bank, test = s.view_set("train"), s.view_set("test")
        for normal in s.normal_sets():
            classes = torch.as_tensor(normal)
            sub = bank.subset(torch.isin(bank.plain.labels, classes))
            score = detectors.score("s_con", sub, test, settings)
            is_id = torch.isin(test.plain.labels, classes)
            pairs[tag].append((score[is_id], score[~is_id]))
    if a.normal_sets() != b.normal_sets():
        raise ValueError("the two checkpoints were trained on different in_classes")
    ma, mb = summary.mean_auroc(pairs["a"]), summary.mean_auroc(pairs["b"])
    d = summary.mean_auroc_difference(pairs["b"], pairs["a"])
    return {"k": k, "b_minus_a": d["difference"], "ci": d["ci"]} | {
        "excludes_zero": d["excludes_zero"],
        "a": ma["auroc"],
        "a_ci": ma["auroc_ci"],
        "b": mb["auroc"],
        "b_ci": mb["auroc_ci"],
    }
