"""``RUN/reports/report.md``: the figures (PNGs drawn by :mod:`linear_eval.report.figures`) and
tables of every result in ``RUN/eval/``, for a person to look at.

Figures from features: t-SNE with cluster indices (MiOC Fig. 5), SINCERE's nearest-neighbour
margins (Table 1), learning curves from ``RUN/metrics.jsonl``; from results: limited labels,
one-class AUROC per class; kappa sections (vMF-κ) only when the model has a kappa head.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from linear_eval.inputs.session import Session, read
from linear_eval.report import figures, markdown
from linear_eval.report.sections import (
    BAR_DETECTOR,
    FIGURES,
    classification_sections,
    detection_sections,
    kappa_sections,
    openood_sections,
    selection_sections,
)


def draw_limited(record: dict[str, Any], report_dir: Path) -> dict[str, Any] | None:
    if not record["rows"]:
        return None
    table = {r["labels_per_class"]: r["accuracies"] for r in record["rows"]}
    return figures.limited_labels_plot(
        table, report_dir / FIGURES["limited"], "linear probe (L-BFGS) with few labels, top-1 %"
    )


def draw_one_class(record: dict[str, Any], report_dir: Path) -> dict[str, Any] | None:
    det = record["detectors"].get(BAR_DETECTOR) or next(iter(record["detectors"].values()), None)
    if det is None:
        return None
    per = {k: v["auroc"] / 100.0 for k, v in det["per_set"].items()}
    name = BAR_DETECTOR if BAR_DETECTOR in record["detectors"] else next(iter(record["detectors"]))
    return figures.auroc_bar_plot(per, report_dir / FIGURES["oneclass"], f"one-class AUROC, {name}")


def kappa_severity(
    severity: torch.Tensor, kappa: torch.Tensor, kinds: list[str], report_dir: Path
) -> dict:
    return figures.kappa_vs_severity(severity, kappa, report_dir / FIGURES["kappa_severity"], kinds)


def checkpoint_row(header: dict[str, Any]) -> dict[str, Any]:
    """The header's values for the report's first table, a data set's identity as its size and
    the start of its digest."""
    row = {k: v for k, v in header.items() if k != "evaluator"}
    for name in ("train_set", "test_set"):
        ident = row.get(name)
        if isinstance(ident, dict):
            row[name] = f"{ident.get('size')} images, sha256 {str(ident.get('sha256'))[:12]}"
    return row


def build(sess: Session) -> dict[str, Any]:
    """Draw the feature figures, assemble every result present in ``RUN/eval`` into
    ``RUN/reports/report.md``; returns the figures' numbers (written to ``eval/figures.json``)."""
    rd, ev, sfx = sess.report_dir, sess.eval_dir, sess.suffix
    rd.mkdir(parents=True, exist_ok=True)
    numbers: dict[str, Any] = {}
    sections: list[dict[str, Any]] = [
        {
            "title": "Checkpoint",
            "table": [checkpoint_row(sess.header("report"))],
        }
    ]
    sections += _training_section(sess, numbers)
    sections += classification_sections(ev, sfx)
    lim = read(ev, "limited", sfx)
    if lim:
        draw_limited(lim, rd)
    oc = read(ev, "oneclass", sfx)
    if oc:
        draw_one_class(oc, rd)
    sections += _geometry_sections(sess, numbers)
    sections += detection_sections(ev, sfx, rd)
    sections += selection_sections(ev, sfx)
    sections += openood_sections(ev, sfx)
    if sess.model.has_kappa:
        sections += kappa_sections(ev, sfx)
    m = sess.model
    title = f"Evaluation of {m.ckpt.name} ({m.cfg.data.name}, epoch {m.epoch})"
    path = markdown.write_report(rd, title, sections)
    sess.write("report", {"figures": numbers, "report": str(path)})
    return {"report": str(path), **numbers}


def _training_section(sess: Session, numbers: dict[str, Any]) -> list[dict[str, Any]]:
    """The learning curves of ``RUN/metrics.jsonl`` (none without it)."""
    rd = sess.report_dir
    metrics = sess.model.run_dir / "metrics.jsonl"
    if not metrics.exists():
        return []
    numbers["learning_curves"] = figures.learning_curves(metrics, rd / FIGURES["learning"])
    return [
        {
            "title": "Learning curves",
            "table": [numbers["learning_curves"]],
            "figure": FIGURES["learning"],
        }
    ]


def _geometry_sections(sess: Session, numbers: dict[str, Any]) -> list[dict[str, Any]]:
    """t-SNE with its cluster indices and the nearest-neighbour margins of the test features."""
    rd, sections = sess.report_dir, []
    train, test = sess.train(), sess.test()
    labelled = test.labels >= 0
    numbers["tsne"] = figures.tsne_plot(
        test.backbone[labelled],
        test.labels[labelled],
        rd / FIGURES["tsne"],
        f"t-SNE of test backbone features, {sess.model.cfg.data.name}, epoch {sess.model.epoch}",
    )
    sections.append(
        {
            "title": "t-SNE and cluster indices",
            "text": "Davies-Bouldin (lower = tighter) and Calinski-Harabasz (higher) on the "
            "L2-normalised test features (MiOC Fig. 5).",
            "table": [numbers["tsne"]],
            "figure": FIGURES["tsne"],
        }
    )
    numbers["nn_margins"] = figures.nn_margin_histograms(
        train.backbone,
        train.labels,
        test.backbone[labelled],
        test.labels[labelled],
        rd / FIGURES["margins"],
    )
    sections.append(
        {
            "title": "Nearest-neighbour margins",
            "text": "Cosine similarity of each test feature to its nearest same-class (target) and "
            "other-class (noise) training feature (SINCERE Table 1).",
            "table": [numbers["nn_margins"]],
            "figure": FIGURES["margins"],
        }
    )
    return sections
