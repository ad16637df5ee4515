"""The sections of ``report.md`` made from the records in ``RUN/eval/``: one function per
evaluator, each returning its titled tables (none when the record is absent)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from linear_eval.inputs.session import read

FIGURES = {
    "learning": "learning_curves.png",
    "tsne": "tsne.png",
    "margins": "nn_margins.png",
    "limited": "limited_labels.png",
    "oneclass": "oneclass_auroc.png",
    "kappa_hist": "kappa_correct_vs_wrong.png",
    "kappa_severity": "kappa_vs_severity.png",
}
BAR_DETECTOR = "s_con"
KNN_TEXT = (
    "Cosine kNN on backbone features: weighted vote exp(cos/T) (presets cifar = InstDisc, "
    "imagenet = DINO, mioc = MiOC's 10-NN with T = 0.1 *assumed*, run = the run's own "
    "eval.knn_*) and SINCERE's majority vote."
)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _num(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def ci(pair: Sequence[float] | None) -> str:
    return "" if not pair else f"[{pair[0]:.2f}, {pair[1]:.2f}]"


def _acc_row(name: str, r: dict[str, Any], **extra: Any) -> dict[str, Any]:
    row = {"variant": name, **extra, "top-1 %": r["top1"], "top-1 95% CI": ci(r["top1_ci"])}
    if r.get("runs", 1) > 1:
        row["std over runs"] = r["top1_std"]
    if "top5" in r:
        row |= {"top-5 %": r["top5"], "top-5 95% CI": ci(r["top5_ci"])}
    return row


def classification_sections(ev: Path, sfx: str) -> list[dict[str, Any]]:
    return [
        *_linear_section(ev, sfx),
        *_knn_section(ev, sfx),
        *_limited_section(ev, sfx),
        *_transfer_section(ev, sfx),
    ]


def _linear_section(ev: Path, sfx: str) -> list[dict[str, Any]]:
    out = []
    lin = read(ev, "linear", sfx)
    if lin:
        p = lin["protocol"]
        out.append(
            {
                "title": "Linear probe",
                "text": f"Frozen backbone, protocol `{p['name']}` ({p.get('source', '')}), seeds "
                f"{lin['seeds']}, on {lin['mode']}. {_sentence(lin['frozen_check'])}",
                "table": [_acc_row(p["name"], lin)],
            }
        )
    return out


def _knn_section(ev: Path, sfx: str) -> list[dict[str, Any]]:
    out = []
    near = read(ev, "knn", sfx)
    if near:
        rows = [
            _acc_row(n, r, k=r["k"], T=r.get("temperature", ""))
            for n, r in near["variants"].items()
        ]
        out.append(
            {
                "title": "kNN",
                "text": KNN_TEXT,
                "table": rows,
            }
        )
    return out


def _limited_section(ev: Path, sfx: str) -> list[dict[str, Any]]:
    out = []
    lim = read(ev, "limited", sfx)
    if lim:
        rows = [
            {
                "labels per class": r["labels_per_class"],
                "top-1 % (mean)": r["top1"],
                "std over draws": r["top1_std"],
                "95% CI": ci(r["top1_ci"]),
                "draws": r["runs"],
            }
            for r in lim["rows"]
        ]
        sec = {
            "title": "Limited labels",
            "text": f"L-BFGS linear probe on k labelled images per class, {lim['draws']} seeded "
            f"draws each. {lim.get('note', '')}",
            "table": rows,
        }
        if rows:
            sec["figure"] = FIGURES["limited"]
        out.append(sec)
    return out


def _transfer_section(ev: Path, sfx: str) -> list[dict[str, Any]]:
    out = []
    tr = read(ev, "transfer", sfx)
    if tr:
        rows = []
        for name, r in tr["datasets"].items():
            k = next(iter(r["knn"]))
            rows.append(
                {
                    "dataset": name,
                    "linear top-1 %": r["linear"]["top1"],
                    "linear 95% CI": ci(r["linear"]["top1_ci"]),
                    f"kNN ({k}) top-1 %": r["knn"][k]["top1"],
                    "kNN 95% CI": ci(r["knn"][k]["top1_ci"]),
                    "classes": r["num_classes"],
                }
            )
        out.append({"title": "Transfer", "text": "Seed transfer resizing.", "table": rows})
    return out


def _det_rows(dets: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "detector": n,
            "AUROC %": d["mean"]["auroc"],
            "AUROC 95% CI": ci(d["mean"]["auroc_ci"]),
            "AUPR-in %": d["mean"]["aupr_in"],
            "AUPR-out %": d["mean"]["aupr_out"],
            "FPR95 % (min)": d["mean"]["fpr95"],
            "FPR95 % (closest)": d["mean"]["fpr95_closest"],
        }
        for n, d in dets.items()
    ]


def detection_sections(ev: Path, sfx: str, report_dir: Path) -> list[dict[str, Any]]:
    return [
        *_one_class_sections(ev, sfx, report_dir),
        *_ood_section(ev, sfx),
        *_aulc_section(ev, sfx),
        *_compare_section(ev, sfx),
    ]


def _one_class_sections(ev: Path, sfx: str, report_dir: Path) -> list[dict[str, Any]]:
    out = []
    oc = read(ev, "oneclass", sfx)
    if oc:
        skipped = "; ".join(f"{k}: {v}" for k, v in oc["skipped"].items())
        sec = {
            "title": "One-class detection",
            "text": f"Normal sets {oc['normal_sets']}; bank = their training images, ID = their "
            f"test images, OOD = the other test images; mean over normal sets. Higher score = "
            f"more normal. s_ens uses {oc['crops']} crops per rotation. Skipped: {skipped or '-'}.",
            "table": _det_rows(oc["detectors"]),
        }
        if (report_dir / FIGURES["oneclass"]).exists():
            sec["figure"] = FIGURES["oneclass"]
        out.append(sec)
        per = [
            {"detector": n} | {f"AUROC {k}": v["auroc"] for k, v in d["per_set"].items()}
            for n, d in oc["detectors"].items()
        ]
        out.append({"title": "One-class AUROC % per normal set", "table": per})
    return out


def _ood_section(ev: Path, sfx: str) -> list[dict[str, Any]]:
    out = []
    od = read(ev, "ood", sfx)
    if od:
        out.append(
            {
                "title": "ID vs OOD datasets",
                "text": f"OOD sets {od['ood_sets']}; metrics averaged over them.",
                "table": _det_rows(od["detectors"]),
            }
        )
    return out


def _aulc_section(ev: Path, sfx: str) -> list[dict[str, Any]]:
    out = []
    au = read(ev, "aulc", sfx)
    if au:
        rows = [
            {
                "detector": n,
                "AULC (AUROC %)": d["aulc"],
                "first": d["points"][0]["auroc"],
                "last": d["points"][-1]["auroc"],
                "checkpoints": len(d["points"]),
            }
            for n, d in au["detectors"].items()
        ]
        out.append({"title": "Area under the learning curve", "table": rows})
    return out


def _compare_section(ev: Path, sfx: str) -> list[dict[str, Any]]:
    out = []
    cmp = read(ev, "compare", sfx)
    if cmp:
        for r in cmp.values():  # a record written before B − A: its "difference" was A − B
            if isinstance(r, dict) and "difference" in r and "b_minus_a" not in r:
                r["b_minus_a"], r["ci"] = -r["difference"], [-r["ci"][1], -r["ci"][0]]
        rows = [
            {
                "metric": name,
                "A": r["a"],
                "A 95% CI": ci(r["a_ci"]),
                "B": r["b"],
                "B 95% CI": ci(r["b_ci"]),
                "B − A": r["b_minus_a"],
                "B − A 95% CI": ci(r["ci"]),
                "significant": r["excludes_zero"],
            }
            for name, r in cmp.items()
            if isinstance(r, dict) and "b_minus_a" in r
        ]
        out.append(
            {
                "title": "Checkpoint comparison",
                "text": f"A = {cmp['a']}, B = {cmp['b']}; paired bootstrap on the same "
                "resampled test sets (SINCERE); significant when the interval of B − A excludes 0. "
                f"Linear probe: {cmp.get('linear_probe', {}).get('name', 'lbfgs')}.",
                "table": rows,
            }
        )
    return out


def kappa_sections(ev: Path, sfx: str) -> list[dict[str, Any]]:
    kp = read(ev, "kappa", sfx)
    if not kp or "skipped" in kp:
        return []
    h = kp["correct_vs_wrong"]
    auc = kp.get("kappa_auroc_correct_vs_wrong", {})
    sev = kp["severity"]
    rows = [
        {"severity": s, "mean κ (all kinds)": m} for s, m in sev["mean_kappa_per_severity"].items()
    ]
    for kind, d in sev["per_kind"].items():
        for row in rows:
            row[f"mean κ {kind}"] = d["mean_kappa_per_severity"].get(str(row["severity"]))
    return [
        {
            "title": "κ: correct vs wrong predictions",
            "text": f"{kp['classifier']}; Mann-Whitney U = {_num(h['u'], '.4g')}, p = "
            f"{_num(h['p_value'], '.3g')}; AUROC of κ as a score of correct (vs wrong) "
            f"predictions {_num(auc.get('auroc'), '.2f')} % {ci(auc.get('auroc_ci'))}.",
            "table": [{k: v for k, v in h.items() if not isinstance(v, dict)}],
            "figure": FIGURES["kappa_hist"],
        },
        {
            "title": "κ vs corruption severity",
            "text": f"Spearman ρ = {sev['spearman_rho']:.3f} (p = {sev['spearman_p']:.3g}). "
            f"Corrupted images: {sev.get('corruptions', 'linear_eval.inputs.corruptions.corrupt')}"
            + (f" ({sev['corruptions_note']})" if sev.get("corruptions_note") else "")
            + ".",
            "table": rows,
            "figure": FIGURES["kappa_severity"],
        },
    ]


def selection_sections(ev: Path, sfx: str) -> list[dict[str, Any]]:
    """``--select-on val`` results: what was chosen, on which held-out split, and test top-1."""
    rows = []
    for name in ("knn", "linear"):
        rec = read(ev, f"{name}_select", sfx)
        if rec:
            sel = rec["selection"]
            chosen = ", ".join(f"{k}={v}" for k, v in sel["selected"].items() if k != "l2")
            rows.append(
                {
                    "evaluator": name,
                    "selected": chosen,
                    "val": sel["val"],
                    "val size": sel["val_size"],
                    "best val top-1": max(sel["val_top1"].values()),
                    "test top-1": rec["top1"],
                }
            )
    if not rows:
        return []
    text = "Hyper-parameters chosen on a held-out part of the training set; test accuracy once."
    return [{"title": "Selection on a validation split", "text": text, "table": rows}]


def openood_sections(ev: Path, sfx: str) -> list[dict[str, Any]]:
    """One section per OpenOOD benchmark in ``RUN/eval/openood_*.json``: a table per detector with
    every OOD set and the near / far means (OpenOOD's columns)."""
    out: list[dict[str, Any]] = []
    for path in sorted(ev.glob(f"openood_*{sfx}.json")):
        rec = json.loads(path.read_text())
        if "detectors" not in rec or (not sfx and path.stem.endswith("_random")):
            continue
        text = (
            f"OpenOOD v1.5 protocol, groups near = {', '.join(rec['groups']['near'])}, far = "
            f"{', '.join(rec['groups']['far'])}. ID accuracy ({rec['id_acc_classifier']}): "
            f"{rec['id_acc']:.2f} %. FPR@95 takes OOD as positive (OpenOOD); FPR@95_ID+ takes ID "
            "(KNN-OOD, CIDER)."
        )
        if rec["skipped"]:
            text += " Skipped: " + "; ".join(f"{k} ({v})" for k, v in rec["skipped"].items())
        out.append({"title": f"OpenOOD: {rec['benchmark']}", "text": text})
        for name, d in rec["detectors"].items():
            rows = d["per_set"] | {"nearood": d["nearood"], "farood": d["farood"]}
            table = [{"set": n} | r for n, r in rows.items() if r]
            out.append(
                {
                    "title": f"OpenOOD {rec['benchmark']}: {name}",
                    "text": d["description"],
                    "table": table,
                }
            )
    return out
