"""Evaluation figures: functions from feature arrays to PNG + numbers. The evaluations of the
embedding (the t-SNE map and its cluster indices, the nearest-neighbour margins) are computed in
:mod:`linear_eval.classify.geometry`; this module draws them.

Each plotting function takes arrays (numpy or torch, any device), writes one PNG (dpi 120, closed
after saving) and returns the numbers it shows as plain Python floats, so a CLI can put them in a
JSON file and in the tables of :func:`linear_eval.report.markdown.write_report`. Papers:

- [001] MiOC, Fig. 5: t-SNE of the features with Davies-Bouldin / Calinski-Harabasz indices.
- [002] SINCERE (arXiv 2309.14277), Table 1: cosine similarity of each test embedding to its
  nearest same-class ("target") and other-class ("noise") training embedding.
- [004] vMF kappa (probabilistic contrastive learning), Table 1: kappa falls as corruption
  severity rises; kappa separates correct from wrong predictions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a display; must precede the pyplot import
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter  # noqa: E402

from linear_eval.classify import geometry, limited  # noqa: E402
from linear_eval.classify import kappa as kappa_numbers  # noqa: E402
from linear_eval.classify.geometry import ArrayLike, as_array  # noqa: E402
from linear_eval.records import training  # noqa: E402
from pretrain.runtime import run_folder  # noqa: E402

DPI = 120


def _save(fig: plt.Figure, path: str | Path) -> None:
    """The figure as a file, written atomically and never through a symbolic link."""
    fmt = Path(path).suffix.lstrip(".") or "png"
    try:  # "tight" keeps legends placed outside the axes inside the image
        run_folder.atomic_write(
            path, lambda f: fig.savefig(f, format=fmt, dpi=DPI, bbox_inches="tight")
        )
    finally:
        plt.close(fig)


def tsne_plot(
    features: ArrayLike,
    labels: ArrayLike,
    path: str | Path,
    title: str,
    seed: int = 0,
    max_points: int = 5000,
    class_names: Sequence[str] | None = None,
) -> dict[str, float]:
    """2-D t-SNE of the L2-normalised features (N, F), coloured by label ([001] Fig. 5).

    scikit-learn TSNE with PCA init and perplexity min(30, (n - 1) / 3); above ``max_points`` a
    seeded random subset is embedded. Davies-Bouldin (lower = tighter clusters) and
    Calinski-Harabasz (higher) are computed on all normalised features as in [001] (keys
    ``davies_bouldin``, ``calinski_harabasz``) and on the plotted 2-D embedding (``*_tsne``).
    """
    emb, y, sub, out = geometry.tsne_map(features, labels, seed, max_points)
    classes = np.unique(y)

    fig, ax = plt.subplots(figsize=(7.5, 6))
    cmap = plt.get_cmap(
        "tab10" if len(classes) <= 10 else "tab20" if len(classes) <= 20 else "turbo"
    )
    for i, c in enumerate(classes):
        m = sub == c
        name = class_names[c] if class_names is not None else str(c)
        color = cmap(i if len(classes) <= 20 else i / (len(classes) - 1))
        ax.scatter(emb[m, 0], emb[m, 1], s=8, color=color, label=name, alpha=0.8, linewidths=0)
    if len(classes) <= 30:
        ax.legend(
            title="class",
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            markerscale=2,
            fontsize=8,
            ncol=1 if len(classes) <= 15 else 2,
        )
    else:  # a 100-entry legend is unreadable: a colour bar of the class index instead
        norm = matplotlib.colors.Normalize(0, len(classes) - 1)
        fig.colorbar(matplotlib.cm.ScalarMappable(norm, cmap), ax=ax, label="class (sorted index)")
    ax.set(xlabel="t-SNE dimension 1", ylabel="t-SNE dimension 2")
    ax.set_title(
        f"{title}\nDB {out['davies_bouldin']:.3f}, CH {out['calinski_harabasz']:.1f} on the "
        f"L2-normalised features (MiOC Fig. 5), not the 2-D map; n={len(y)}",
        fontsize=9,
    )
    _save(fig, path)
    return out


def nn_margin_histograms(
    train_features: ArrayLike,
    train_labels: ArrayLike,
    test_features: ArrayLike,
    test_labels: ArrayLike,
    path: str | Path,
    chunk: int = 1024,
) -> dict[str, float]:
    """Nearest same-class ("target") vs nearest other-class ("noise") training similarity.

    For each test embedding z and L2-normalised training bank B ([002] Table 1):
    target = max_{b in B, y_b = y_z} cos(z, b), noise = max_{b in B, y_b != y_z} cos(z, b),
    margin = target - noise. Returns the means and the fraction of samples with margin > 0.
    """
    t, n, out = geometry.nn_margins(train_features, train_labels, test_features, test_labels, chunk)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    bins = np.linspace(min(t.min(), n.min()), max(t.max(), n.max()), 41)
    ax.hist(
        t, bins, alpha=0.55, color="tab:blue", label=f"target (same class), mean {t.mean():.3f}"
    )
    ax.hist(n, bins, alpha=0.55, color="tab:red", label=f"noise (other class), mean {n.mean():.3f}")
    ax.set(xlabel="cosine similarity to nearest training embedding", ylabel="test samples")
    ax.set_title(
        f"SINCERE Table 1 margin: mean {out['mean_margin']:.3f}, "
        f"{100 * out['frac_positive_margin']:.1f}% of {len(t)} test samples positive",
        fontsize=10,
    )
    ax.legend(loc="best")
    _save(fig, path)
    return out


def kappa_histograms(kappa: ArrayLike, correct: ArrayLike, path: str | Path) -> dict[str, Any]:
    """kappa of correctly vs wrongly classified samples, with a two-sided Mann-Whitney U test.

    ``u`` is U of the correct group (scipy's convention), ``effect_size`` = U / (n_c * n_w) =
    P(kappa_correct > kappa_wrong) + P(tie) / 2. With an empty group there is no test: ``u`` and
    ``p_value`` are None and ``note`` says why.
    """
    k, ok, out = kappa_numbers.correct_vs_wrong(kappa, correct)
    kc, kw = k[ok], k[~ok]

    fig, ax = plt.subplots(figsize=(7, 4.5))
    bins = np.linspace(k.min(), k.max() + (k.max() == k.min()), 41)
    for group, color, name in ((kc, "tab:green", "correct"), (kw, "tab:red", "wrong")):
        if len(group):
            ax.hist(
                group,
                bins,
                density=True,
                alpha=0.55,
                color=color,
                label=f"{name} (n={len(group)}, mean {group.mean():.3g})",
            )
            ax.axvline(group.mean(), color=color, linestyle="--", linewidth=1)
    test = (
        f"Mann-Whitney U={out['u']:.6g}, p={out['p_value']:.3g}"
        if out["u"] is not None
        else out["note"]
    )
    ax.set(xlabel="κ (vMF concentration)", ylabel="density")
    ax.set_title(f"κ of correct vs wrong predictions; {test}", fontsize=10)
    ax.legend(loc="best")
    _save(fig, path)
    return out


def _curve(record: dict[str, Any]) -> tuple[dict[int, float], dict[int, float]]:
    return record["mean_kappa_per_severity"], record["std_kappa_per_severity"]


def kappa_vs_severity(
    severity: ArrayLike, kappa: ArrayLike, path: str | Path, kinds: Sequence[str] | None = None
) -> dict[str, Any]:
    """Mean kappa (± population std) per corruption severity (0 = clean .. 5), [004] Table 1.

    Spearman rho between kappa and severity over samples, overall and per corruption kind. The
    clean samples (severity 0) belong to every kind, whatever their entry in ``kinds``, so each
    kind's curve and rho start from the same clean set.
    """
    out = kappa_numbers.severity_trend(severity, kappa, kinds)
    rho, p, mean, std = out["spearman_rho"], out["spearman_p"], *_curve(out)
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    names = list(out["per_kind"])
    colors = plt.get_cmap("tab10" if len(names) <= 10 else "tab20").colors
    for name, color in zip(names, colors * (len(names) // len(colors) + 1)):
        kind = out["per_kind"][name]
        mk, sk = _curve(kind)
        ax.errorbar(
            list(mk),
            list(mk.values()),
            yerr=list(sk.values()) if len(names) <= 4 else None,  # 15 bars are clutter
            color=color,
            marker="o",
            ms=3,
            capsize=2,
            linewidth=1,
            alpha=0.8,
            label=f"{name} (ρ={kind['spearman_rho']:.2f})",
        )
    ax.errorbar(
        list(mean),
        list(mean.values()),
        yerr=list(std.values()),
        color="black",
        marker="s",
        linewidth=2.5,
        capsize=3,
        label=f"all (ρ={rho:.2f})",
    )
    ax.set_xticks(range(6))
    ax.set(xlabel="corruption severity (0 = clean)", ylabel="mean κ (± std over samples)")
    bars = "std bars on 'all' only" if len(out["per_kind"]) > 4 else "bars: std"
    ax.set_title(
        f"κ vs corruption severity: Spearman ρ={rho:.3f} (p={p:.2g}), n={out['n']}; {bars}",
        fontsize=10,
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    _save(fig, path)
    return out


def learning_curves(metrics_path: str | Path, path: str | Path) -> dict[str, Any]:
    """Training loss per logged step and per epoch (mean), and kNN top-1 per evaluated epoch.

    x is the epoch: fractional for step lines, the number of finished epochs for epoch lines.
    ``final_loss`` is the last epoch mean (the last step loss if no epoch finished).
    """
    recs = training.read_metrics(metrics_path)
    out = training.curve_summary(recs)
    steps = [r for r in recs if r["kind"] == "step"]
    epochs = [r for r in recs if r["kind"] == "epoch"]
    knn = training.knn_points(epochs)
    best = max(knn, key=lambda r: r["knn_top1"], default=None)

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 6), sharex=True)
    if steps:
        top.plot(
            [r["epoch"] for r in steps],
            [r["loss"] for r in steps],
            linewidth=0.8,
            alpha=0.7,
            color="tab:blue",
            label="per logged step",
        )
    if epochs:
        top.plot(
            [r["epoch"] for r in epochs],
            [r["loss"] for r in epochs],
            "o-",
            color="tab:orange",
            markersize=3,
            label="epoch mean",
        )
    last = "last epoch mean" if epochs else "last logged step"
    top.set(ylabel="training loss", title=f"final loss {out['final_loss']:.4g} ({last})")
    top.legend(loc="best")
    if knn:
        bottom.plot(
            [r["epoch"] for r in knn],
            [r["knn_top1"] for r in knn],
            "o-",
            color="tab:green",
            markersize=3,
            label=f"kNN top-1 (best {best['knn_top1']:.2f} at epoch "
            f"{best['epoch']}, last {knn[-1]['knn_top1']:.2f})",
        )
        bottom.legend(loc="best")
    else:
        bottom.text(
            0.5,
            0.5,
            "no kNN evaluation in this run",
            ha="center",
            va="center",
            transform=bottom.transAxes,
        )
    bottom.set(xlabel="epoch", ylabel="kNN top-1 (%)")
    _save(fig, path)
    return out


def limited_labels_plot(
    table: Mapping[Any, Sequence[float]] | Sequence[Mapping[str, Any]],
    path: str | Path,
    title: str = "linear probe with few labels",
) -> dict[int, dict[str, float]]:
    """Mean ± sample std (ddof 1; 0 for one draw) of accuracy over draws vs labels per class.

    ``table`` is {labels_per_class: [accuracy of each draw]} or rows
    {"labels_per_class": n, "accuracy": a} (one per draw) / {..., "accuracies": [a, ...]}.
    """
    out = limited.draws_summary(table)
    ns = list(out)
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.errorbar(
        ns,
        [v["mean"] for v in out.values()],
        yerr=[v["std"] for v in out.values()],
        marker="o",
        capsize=3,
        label="mean ± std over draws",
    )
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(ns))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set(xlabel="labelled samples per class (log scale)", ylabel="accuracy", title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    _save(fig, path)
    return out


def auroc_bar_plot(
    per_class: Mapping[Any, float] | Sequence[float], path: str | Path, title: str
) -> dict[str, Any]:
    """One bar per normal class of the one-class AUROC, with the mean as a dashed line."""
    items = list(per_class.items() if isinstance(per_class, Mapping) else enumerate(per_class))
    names = [str(c) for c, _ in items]
    v = as_array([a for _, a in items], "per_class AUROC", 1)
    mean = float(v.mean())
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(v) + 2), 4.5))
    bars = ax.bar(range(len(v)), v, color="tab:blue", label="per class")
    ax.axhline(mean, color="tab:red", linestyle="--", label=f"mean {mean:.3f}")
    if len(v) <= 20:  # a white box keeps a value readable where the mean line crosses it
        for text in ax.bar_label(bars, fmt="%.3f", fontsize=7, padding=2):
            text.set(bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5}, zorder=3)
    long_names = len(v) > 10 or max(map(len, names)) > 5  # would overlap when horizontal
    tilt = {"rotation": 45, "ha": "right"} if long_names else {}
    ax.set_xticks(range(len(v)), names, **tilt)
    ax.set_ylim(min(0.5, v.min() - 0.05), max(1.0, v.max()) * 1.06)
    ax.set(xlabel="normal class (one-class setting)", ylabel="AUROC", title=title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _save(fig, path)
    return {
        "mean": mean,
        "min": float(v.min()),
        "max": float(v.max()),
        "per_class": dict(zip(names, v.tolist())),
    }
