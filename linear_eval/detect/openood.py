"""OpenOOD v1.5's protocol (``python -m linear_eval openood``) on a checkpoint's backbone features.

Per OOD set and per group (near / far) mean: AUROC, AUPR-In, AUPR-Out and FPR@95 under both
conventions: ``FPR@95`` is OpenOOD's (OOD is the positive class: the fraction of ID images flagged
as OOD when 95 % of the OOD images are caught), ``FPR@95_ID+`` the KNN-OOD / CIDER papers' (ID
positive: the fraction of OOD images accepted when 95 % of ID images are kept). ``ACC`` is the ID
test accuracy of the weighted kNN classifier (k 200, T 0.1) on the same features. Results go to
``RUN/eval/openood_<benchmark>.json``, one CSV per detector with OpenOOD's columns
(``RUN/eval/openood_<benchmark>_<detector>.csv``, rows like OpenOOD's ``results/*.csv``) and a
section of ``RUN/reports/report.md``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from linear_eval.detect import fitted
from linear_eval.inputs import openood
from linear_eval.inputs.features import encode
from linear_eval.inputs.session import Session
from linear_eval.records import metrics
from pretrain.metrics.knn import knn_predict
from pretrain.runtime import run_folder

CSV_COLUMNS = ("dataset", "FPR@95", "AUROC", "AUPR_IN", "AUPR_OUT", "ACC", "FPR@95_ID+")


def detection_row(id_scores: torch.Tensor, ood_scores: torch.Tensor) -> dict[str, float]:
    """Metrics in percent; OpenOOD's FPR@95 takes OOD as positive, ``FPR@95_ID+`` takes ID."""
    s_id, s_ood = id_scores.double().numpy(), ood_scores.double().numpy()
    return {
        "AUROC": 100.0 * metrics.auroc(s_id, s_ood),
        "AUPR_IN": 100.0 * metrics.aupr(s_id, s_ood),
        "AUPR_OUT": 100.0 * metrics.aupr_out(s_id, s_ood),
        "FPR@95": 100.0 * metrics.fpr_at_tpr(-s_ood, -s_id, 0.95, "min"),
        "FPR@95_ID+": 100.0 * metrics.fpr_at_tpr(s_id, s_ood, 0.95, "min"),
    }


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]} if rows else {}


def _extract(sess: Session, ds: openood.ImageList) -> tuple[torch.Tensor, torch.Tensor]:
    loader = DataLoader(
        ds,
        batch_size=sess.store.batch_size,
        num_workers=sess.store.num_workers,
        shuffle=False,
    )
    f = encode(sess.model.encoder, loader, sess.store.device)
    return f.backbone, f.labels


def run_openood(
    sess: Session,
    benchmark: str,
    root: str | Path,
    names: Sequence[str] = tuple(fitted.FITTERS),
    *,
    knn: dict[str, Any],
) -> dict[str, Any]:
    """OpenOOD v1.5 ``benchmark`` from ``root`` (its layout); see the module docstring. ``knn``: the
    ID accuracy's ``k`` and ``temperature`` (the command: ``classify.knn.PRESETS["cifar"]``)."""
    if benchmark not in openood.BENCHMARKS:
        raise ValueError(
            f"unknown benchmark {benchmark!r}; choose from {', '.join(openood.BENCHMARKS)}"
        )
    for n in names:
        if n not in fitted.FITTERS:
            raise ValueError(
                f"unknown OpenOOD detector {n!r}; choose from {', '.join(fitted.FITTERS)}"
            )
    b = openood.BENCHMARKS[benchmark]
    train, test, ood_sets, skipped = openood.open_sets(root, b)  # all checked before extraction
    bank, bank_y = _extract(sess, train)
    feats, labels = _extract(sess, test)
    c = max(b.num_classes, int(bank_y.max()) + 1)
    pred = knn_predict(bank, bank_y, feats, knn["k"], knn["temperature"], c)
    acc = 100.0 * (pred == labels).double().mean().item()
    ood_feats = {n: _extract(sess, ds)[0] for n, ds in ood_sets.items()}
    per_detector: dict[str, Any] = {}
    for name in names:
        scorer = fitted.fit(name, bank, bank_y)  # fitted once, scores every set
        s_id = scorer(feats).cpu()
        rows = {n: detection_row(s_id, scorer(f).cpu()) for n, f in ood_feats.items()}
        near = _mean([rows[n] for n in b.near if n in rows])
        far = _mean([rows[n] for n in b.far if n in rows])
        per_detector[name] = {
            "description": fitted.DESCRIPTIONS[name],
            "per_set": rows,
            "nearood": near,
            "farood": far,
        }
        write_csv(sess.eval_dir / f"openood_{benchmark}_{name}.csv", b, rows, near, far, acc)
    record = {
        "benchmark": benchmark,
        "root": str(Path(root).resolve()),
        "groups": {"near": list(b.near), "far": list(b.far)},
        "preprocessing": repr(openood.transform(b)),
        "features": "backbone (pooled, penultimate)",
        "id_acc": acc,
        "id_acc_classifier": f"weighted kNN k={knn['k']} T={knn['temperature']}",
        "sizes": {"train": len(train), "test": len(test)}
        | {n: len(d) for n, d in ood_sets.items()},
        "skipped": skipped,
        "fpr95_conventions": {
            "FPR@95": "OpenOOD: OOD positive (ID flagged as OOD at 95 % OOD recall)",
            "FPR@95_ID+": "KNN-OOD / CIDER papers: ID positive (OOD accepted at 95 % ID recall)",
        },
        "detectors": per_detector,
    }
    sess.write(f"openood_{benchmark}", record)
    return record


def write_csv(
    path: Path,
    b: openood.Benchmark,
    rows: dict[str, dict[str, float]],
    near: dict[str, float],
    far: dict[str, float],
    acc: float,
) -> None:
    """OpenOOD's ``results/*.csv`` rows: every OOD set, then ``nearood`` and ``farood`` means,
    in its group order (near sets, nearood, far sets, farood)."""
    order = [n for n in b.near if n in rows] + ["nearood"] + [n for n in b.far if n in rows]
    order.append("farood")
    table = rows | {"nearood": near, "farood": far}
    fh = io.StringIO(newline="")
    w = csv.writer(fh)
    w.writerow(CSV_COLUMNS)
    for n in order:
        r = table[n]
        if not r:
            continue
        w.writerow([n] + [f"{r[c]:.2f}" if c != "ACC" else f"{acc:.2f}" for c in CSV_COLUMNS[1:]])
    run_folder.write_text(path, fh.getvalue())
