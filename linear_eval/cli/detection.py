"""The detection subcommands: one-class, ID vs OOD datasets, AULC over checkpoints, and the kappa
analyses (vMF-κ). Each writes ``RUN/eval/<evaluator>.json`` (and its figures) and returns the
record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from linear_eval.classify import logreg
from linear_eval.detect import detectors, protocols, scores
from linear_eval.detect.detectors import DEFAULT_SETTINGS, Settings
from linear_eval.inputs import corruptions
from linear_eval.inputs.features import CORRUPT_SOURCE
from linear_eval.inputs.session import Session
from linear_eval.records import summary
from linear_eval.report import document, figures
from pretrain.data.datasets import DatasetNotFoundError

# the CIFAR-10 OOD benchmark of Ming et al. 2023 (CIDER) and Sun et al. 2022 (KNN+)
CIFAR10_OOD = ("svhn", "lsun", "isun", "textures", "places365", "cifar100")
CORRUPTIONS = ("gaussian_noise", "gaussian_blur")
SEVERITIES = (1, 2, 3, 4, 5)
AULC_DETECTORS = ("s_con", "s_center", "knn+", "maha_tied", "kde")
CIFAR_C = {"cifar10": "CIFAR-10-C", "cifar100": "CIFAR-100-C"}  # run dataset -> its -C folder


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
    """One-class protocol over every class (or the run's ``data.in_classes``)."""
    names = detectors.check(list(names))
    rotations, n_crops = _views_needed(names, crops)
    bank = sess.view_set("train", rotations=rotations)
    test = sess.view_set("test", rotations=rotations, crops=n_crops, crop_seed=settings.seed)
    record = protocols.one_class(bank, test, sess.normal_sets(), names, settings)
    record["crops"] = n_crops
    if write:
        sess.write("oneclass", record)
        document.draw_one_class(record, sess.report_dir)
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


@dataclass(frozen=True)
class CorruptionSource:
    """Where the corrupted test images of :func:`run_kappa` come from."""

    files: Path | None  # folder of <kind>.npy + labels.npy; None: corrupt() on the test set
    description: str  # "CIFAR-10-C .npy files at PATH" or "linear_eval.inputs.corruptions.corrupt"
    note: str | None = None  # why the files were not used, when the run could have used them


def corruption_source(
    sess: Session, kinds: Sequence[str] = CORRUPTIONS, root: str | Path | None = None
) -> CorruptionSource:
    """CIFAR-10-C's (CIFAR-100-C's) .npy files [Hendrycks & Dietterich 2019] for a cifar10
    (cifar100) run when they are in ``root``, by default ``<data root>/CIFAR-10-C``; else our own
    :func:`linear_eval.inputs.corruptions.corrupt`. Every file used is opened and checked (shapes,
    one label per image) here, before any extraction.

    Raises:
        DatasetNotFoundError: ``root`` is not a folder, or the folder used lacks ``labels.npy`` or
            a kind's ``<kind>.npy``.
        ValueError: ``root`` given for a run on another dataset; files of the wrong shape.
    """
    dataset = sess.model.cfg.data.name
    folder_name = CIFAR_C.get(dataset)
    if folder_name is None:
        if root is not None:
            raise ValueError(
                f"--corruptions-root reads CIFAR-10-C or CIFAR-100-C, the corrupted test sets of "
                f"a cifar10 or cifar100 run; this run's dataset is {dataset}: drop the option"
            )
        return CorruptionSource(None, CORRUPT_SOURCE)
    folder = Path(root if root is not None else Path(sess.store.data_root) / folder_name)
    folder = folder.expanduser().resolve()
    if not folder.is_dir():
        if root is None:
            note = f"no folder {folder}: corruptions computed by {CORRUPT_SOURCE} instead"
            return CorruptionSource(None, CORRUPT_SOURCE, note)
        raise DatasetNotFoundError(
            f"--corruptions-root {root}: {folder} is not a folder. Point it at the folder that "
            f"holds {folder_name}'s <corruption>.npy files and labels.npy, or drop it ("
            f"default: <data root>/{folder_name} when present, else {CORRUPT_SOURCE})."
        )
    for kind in kinds:
        corruptions.Cifar10C(str(folder.parent), kind, 1, folder=folder.name)
    return CorruptionSource(folder, f"{folder_name} .npy files at {folder}")


def run_kappa(
    sess: Session,
    kinds: Sequence[str] = CORRUPTIONS,
    severities: Sequence[int] = SEVERITIES,
    corruptions_root: str | Path | None = None,
) -> dict[str, Any]:
    """vMF-κ analyses: kappa of correctly vs wrongly classified test images (L-BFGS linear
    probe, Mann-Whitney U; AUROC of kappa as a correctness score) and kappa vs corruption
    severity (Spearman), the corrupted images from :func:`corruption_source`."""
    if not sess.model.has_kappa:
        record = {"skipped": "the model has no kappa head"}
        sess.write("kappa", record)
        return record
    source = corruption_source(sess, kinds, corruptions_root)
    train, test = sess.train(), sess.test()
    fc, _ = logreg.train(train.backbone, train.labels, sess.num_classes)
    correct = fc(test.backbone).argmax(1).cpu() == test.labels
    out = sess.report_dir
    hist = figures.kappa_histograms(test.kappa, correct, out / document.FIGURES["kappa_hist"])
    record: dict[str, Any] = {"correct_vs_wrong": hist, "classifier": "L-BFGS linear probe"}
    if correct.any() and not correct.all():
        k = test.kappa.cpu().double()
        record["kappa_auroc_correct_vs_wrong"] = summary.detection(k[correct], k[~correct])
    severity = [torch.zeros(len(test), dtype=torch.long)]  # 0 = clean
    kappa, kind = [test.kappa.cpu()], ["clean"] * len(test)
    for k in kinds:
        for s in severities:
            f = sess.store.features(None, "test", corruption=(k, s), corruption_files=source.files)
            severity.append(torch.full((len(f),), s))
            kappa.append(f.kappa.cpu())
            kind += [k] * len(f)
    notes = {} if source.note is None else {"corruptions_note": source.note}
    record["severity"] = document.kappa_severity(
        torch.cat(severity), torch.cat(kappa), kind, out
    ) | {"kinds": list(kinds), "corruptions": source.description, **notes}
    sess.write("kappa", record)
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
