"""``python -m linear_eval kappa``: the kappa analyses (vMF-κ) of a checkpoint with a kappa head,
kappa against the linear probe's correctness and against corruption severity, with their figures.
It wires the rooms together (the L-BFGS probe of ``classify``, the detection summary, the corrupted
inputs and the report's figures), so it lives at the command line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from linear_eval.classify import logreg
from linear_eval.inputs import corruptions
from linear_eval.inputs.features import CORRUPT_SOURCE
from linear_eval.inputs.session import Session
from linear_eval.records import summary
from linear_eval.report import document, figures
from pretrain.data.datasets import DatasetNotFoundError

CORRUPTIONS = ("gaussian_noise", "gaussian_blur")
SEVERITIES = (1, 2, 3, 4, 5)
CIFAR_C = {"cifar10": "CIFAR-10-C", "cifar100": "CIFAR-100-C"}  # run dataset -> its -C folder


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
