"""The classification evaluations of a checkpoint: read features through a :class:`Session`, run
one evaluator, write ``RUN/eval/<evaluator>.json``, return the record (what the classification
subcommands run; their figures are drawn by the command line and the report).

Detection (one-class, ID vs OOD, AULC) lives in :mod:`linear_eval.detect.evaluate`, the kappa
analyses in :mod:`linear_eval.cli.kappa`; the report in :mod:`linear_eval.report.document`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from linear_eval.classify import knn, limited, linear, probe, select, transfer
from linear_eval.inputs.features import describe
from linear_eval.inputs.session import Session
from linear_eval.records import stats, summary

FROZEN_NOTE = (
    "after training, every encoder parameter and buffer (BatchNorm running statistics included) "
    "was compared with the checkpoint's and found equal"
)
CACHED_NOTE = (  # nothing to check: the encoder does not run while the probe trains
    "the probe trained on features extracted once, in eval mode and without gradients; the "
    "encoder did not run while it trained"
)


def run_linear(
    sess: Session,
    recipe_name: str = "lbfgs",
    seeds: Sequence[int] = (0, 1, 2),
    mode: str = "features",
) -> dict[str, Any]:
    """Linear probe on the frozen backbone: ``features`` (cached, un-augmented) or ``images``
    (augmented images through the backbone, SGD recipes only)."""
    recipe = probe.protocol(recipe_name)
    train, test = sess.train(), sess.test()
    c = sess.num_classes
    if mode == "features":
        record, _ = linear.evaluate(
            train.backbone, train.labels, test.backbone, test.labels, c, recipe, seeds
        )
    elif mode == "images":
        if recipe.solver != "sgd":
            raise ValueError("--probe images needs an SGD protocol (moco, mioc, transfer)")
        correct, lr_log = [], []
        for seed in seeds:
            lr_log.clear()
            fc = probe.train_on_images(
                sess.model.encoder.backbone,
                sess.store.augmented_loader(recipe.batch_size, seed),
                c,
                train.backbone.shape[1],
                sess.store.device,
                epochs=recipe.epochs,
                lr=recipe.lr,
                milestones=list(recipe.milestones),
                weight_decay=recipe.weight_decay,
                seed=seed,
                lr_log=lr_log,
            )
            scores = probe.predict(fc, test.backbone.to(sess.store.device)).cpu()
            correct.append((scores.argmax(1) == test.labels).cpu())
        record = {
            "protocol": recipe.as_dict(),
            "seeds": list(seeds),
            **summary.accuracy(torch.stack(correct), "top1"),
            "lr_by_epoch": probe.lr_changes(lr_log),  # as the optimizer held it (every seed)
        }
    else:
        raise ValueError(f"probe mode must be 'features' or 'images', got {mode!r}")
    if mode == "images":  # the augmented images went through the backbone
        sess.model.assert_unchanged()
    note = FROZEN_NOTE if mode == "images" else CACHED_NOTE
    record |= {"mode": mode, "frozen_check": note, "train": describe(train)}
    sess.write("linear", record)
    return record


def run_knn(sess: Session, presets: Sequence[str] = tuple(knn.PRESETS)) -> dict[str, Any]:
    """Weighted kNN presets, the run's own (k, T) as ``run``, and SINCERE's 1-NN / 5-NN."""
    train, test = sess.train(), sess.test()
    e = sess.model.cfg.eval
    own = {"run": {"k": e.knn_k, "temperature": e.knn_temperature, "source": "the run's eval.*"}}
    records, _ = knn.evaluate(
        train.backbone, train.labels, test.backbone, test.labels, sess.num_classes, presets, own
    )
    record = {"variants": records, "distance": "cosine on backbone features"}
    sess.write("knn", record)
    return record


def run_selected(
    sess: Session, evaluator: str, fraction: float = select.FRACTION, seed: int = 0
) -> dict[str, Any]:
    """``--select-on val``: kNN (k, T) or the linear protocol chosen on a stratified held-out part
    of the training set, test accuracy reported once; ``RUN/eval/<evaluator>_select.json``."""
    train, test = sess.train(), sess.test()
    fn = select.knn if evaluator == "knn" else select.linear
    record = fn(
        train.backbone,
        train.labels,
        test.backbone,
        test.labels,
        sess.num_classes,
        fraction=fraction,
        seed=seed,
    )
    sess.write(f"{evaluator}_select", record)
    return record


def run_limited(
    sess: Session,
    counts: Sequence[int] = limited.COUNTS,
    draws: int = limited.DRAWS,
    recipe_name: str = "lbfgs",
    seed: int = 0,
) -> dict[str, Any]:
    """Linear evaluation with k labels per class over seeded draws (its plot:
    :func:`linear_eval.report.document.draw_limited`)."""
    train, test = sess.train(), sess.test()
    record = limited.evaluate(
        train.backbone,
        train.labels,
        test.backbone,
        test.labels,
        sess.num_classes,
        probe.protocol(recipe_name),
        counts,
        draws,
        seed,
    )
    sess.write("limited", record)
    return record


def run_transfer(
    sess: Session,
    names: Sequence[str] = transfer.DEFAULT_DATASETS,
    recipe_name: str = "lbfgs",
    seeds: Sequence[int] = (0,),
    knn_presets: Sequence[str] = ("cifar",),
) -> dict[str, Any]:
    """Linear probe + kNN on each transfer dataset. Every dataset is opened before any feature is
    extracted, so a missing one fails at once (DatasetNotFoundError names its path)."""
    recipe = probe.protocol(recipe_name)
    for name in names:
        for split in ("train", "test"):
            sess.store.dataset(name, split)
    per: dict[str, Any] = {}
    for name in names:
        tr = sess.features("train", name, transform="transfer")
        te = sess.features("test", name, transform="transfer")
        per[name] = transfer.evaluate(
            tr.backbone, tr.labels, te.backbone, te.labels, recipe, seeds, knn_presets
        )
        per[name]["transform"] = repr(sess.store.transform(name, "transfer"))
    record = {"datasets": per, "protocol": recipe.as_dict()}
    sess.write("transfer", record)
    return record


def check_same_test_set(a: Session, b: Session) -> None:
    """ValueError unless the two checkpoints' test sets are one (:meth:`Session.test_set`: size,
    and the files' paths, labels and sizes, or pixels): compare pairs test images, and two
    folders of equal size, even under the same file names, would pair unrelated ones."""
    ids = [a.test_set(), b.test_set()]
    if ids[0] != ids[1]:
        same_size = ids[0]["size"] == ids[1]["size"]
        what = "their files, labels or pixels differ" if same_size else "another size"
        raise ValueError(
            f"compare needs one test set: {a.model.ckpt} is evaluated on {ids[0]['size']} test "
            f"images, {b.model.ckpt} on {ids[1]['size']} ({what}); compare pairs each test "
            "image's results, so evaluate both on the same data (--data-root)"
        )


def compare(
    a: Session, b: Session, knn_preset: str = "cifar", protocol: str = "lbfgs"
) -> dict[str, Any]:
    """Checkpoint B against the reference A on the same test set: paired bootstrap intervals of
    B − A (the sign of ``table``'s run − baseline) for kNN top-1 and the linear probe
    ``protocol``'s top-1 (SINCERE's test). ``python -m linear_eval compare`` adds the one-class
    s_con AUROC (:func:`linear_eval.detect.evaluate.compare_one_class`) and writes the record."""
    if a.model.cfg.data.name != b.model.cfg.data.name:
        raise ValueError(
            f"compare needs the same dataset: {a.model.cfg.data.name} vs {b.model.cfg.data.name}"
        )
    check_same_test_set(a, b)
    recipe = probe.protocol(protocol)
    correct = {}
    for tag, s in (("a", a), ("b", b)):
        tr, te = s.train(), s.test()
        _, near = knn.evaluate(
            tr.backbone, tr.labels, te.backbone, te.labels, s.num_classes, [knn_preset], majority=()
        )
        _, lin = linear.evaluate(
            tr.backbone, tr.labels, te.backbone, te.labels, s.num_classes, recipe
        )
        correct[tag] = {"knn": near[knn_preset], "linear": lin[0]}
    record: dict[str, Any] = {
        "a": str(a.model.ckpt),
        "b": str(b.model.ckpt),
        "sign": "B - A (A is the reference, as table's --baseline)",
        "knn": {"preset": knn_preset, **knn.PRESETS[knn_preset]},
        "linear_probe": recipe.as_dict(),
    }
    for what in ("knn", "linear"):
        ca, cb = correct["a"][what], correct["b"][what]
        d = stats.paired_difference_ci(cb.numpy().astype("int8"), ca.numpy().astype("int8"))
        ra, rb = summary.accuracy(ca, "a"), summary.accuracy(cb, "b")
        record[f"{what}_top1"] = {
            "a": ra["a"],
            "a_ci": ra["a_ci"],
            "b": rb["b"],
            "b_ci": rb["b_ci"],
            "b_minus_a": d.point,
            "ci": [d.low, d.high],
            "excludes_zero": d.excludes_zero,
        }
    return record
