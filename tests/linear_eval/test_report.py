"""Evaluation figures and report.md: each function writes a readable PNG and returns numbers equal
to independent references (scikit-learn / scipy called here, or numpy float64 re-derivations)."""

from __future__ import annotations

import json
import re

import matplotlib.image as mpimg
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.manifold import TSNE
from sklearn.metrics import calinski_harabasz_score, davies_bouldin_score

from linear_eval.report import figures, markdown

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path):
    """A real PNG that matplotlib reads back with nonzero size, and no figure left open."""
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50
    assert img.std() > 0  # something was drawn
    assert plt.get_fignums() == []


def blobs(seed: int, n: int = 200, f: int = 16, c: int = 4):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    x = 2.0 * rng.standard_normal((c, f))[y] + rng.standard_normal((n, f))
    return x, y


def l2(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# ---- t-SNE + cluster indices (MiOC Fig. 5) ----


def test_tsne_indices_match_sklearn_on_features_and_embedding(tmp_path):
    x, y = blobs(0)
    got = figures.tsne_plot(x, y, tmp_path / "tsne.png", "blobs", seed=3)
    assert_png(tmp_path / "tsne.png")
    xn = l2(x)
    assert got["davies_bouldin"] == pytest.approx(davies_bouldin_score(xn, y), rel=1e-12)
    assert got["calinski_harabasz"] == pytest.approx(calinski_harabasz_score(xn, y), rel=1e-12)
    emb = TSNE(2, perplexity=30.0, init="pca", random_state=3).fit_transform(xn)
    assert got["davies_bouldin_tsne"] == pytest.approx(davies_bouldin_score(emb, y), rel=1e-9)
    assert got["calinski_harabasz_tsne"] == pytest.approx(calinski_harabasz_score(emb, y), rel=1e-9)
    assert got["n_points"] == got["n_tsne_points"] == 200


def test_tsne_normalises_rows_and_subsamples_deterministically(tmp_path):
    x, y = blobs(1, n=60)
    scale = np.random.default_rng(9).uniform(0.1, 10.0, (len(x), 1))
    a = figures.tsne_plot(torch.from_numpy(x), torch.from_numpy(y), tmp_path / "a.png", "a",
                         max_points=45)  # fmt: skip
    b = figures.tsne_plot(x * scale, y, tmp_path / "b.png", "b", max_points=45)
    # cluster indices are on normalised features: a row scale changes nothing
    assert a["davies_bouldin"] == pytest.approx(b["davies_bouldin"], rel=1e-9)
    assert a["calinski_harabasz"] == pytest.approx(b["calinski_harabasz"], rel=1e-9)
    assert a["davies_bouldin"] == pytest.approx(davies_bouldin_score(l2(x), y), rel=1e-12)
    assert a["n_points"] == 60 and a["n_tsne_points"] == 45
    # same seed, same subset and embedding (up to the float error of the scaling)
    assert a["davies_bouldin_tsne"] == pytest.approx(b["davies_bouldin_tsne"], rel=1e-4)
    assert_png(tmp_path / "a.png")


def test_tsne_rejects_a_single_class(tmp_path):
    x, _ = blobs(2, n=20)
    with pytest.raises(ValueError, match="2 <= classes"):
        figures.tsne_plot(x, np.zeros(20, int), tmp_path / "t.png", "one class")


# ---- SINCERE nearest-neighbour margins (SINCERE Table 1) ----


def np_margins(train, ytr, test, yte):
    train, test = l2(train), l2(test)
    target, noise = [], []
    for z, y in zip(test, yte):
        sims = [float(np.dot(z, b)) for b in train]
        target.append(max(s for s, yb in zip(sims, ytr) if yb == y))
        noise.append(max(s for s, yb in zip(sims, ytr) if yb != y))
    return np.array(target), np.array(noise)


def test_nn_margins_match_numpy_loop(tmp_path):
    train, ytr = blobs(3, n=80)
    test, yte = blobs(4, n=50)
    got = figures.nn_margin_histograms(train, ytr, test, yte, tmp_path / "m.png", chunk=7)
    assert_png(tmp_path / "m.png")
    t, n = np_margins(train, ytr, test, yte)
    assert got["mean_target"] == pytest.approx(t.mean(), abs=1e-12)
    assert got["mean_noise"] == pytest.approx(n.mean(), abs=1e-12)
    assert got["mean_margin"] == pytest.approx((t - n).mean(), abs=1e-12)
    assert got["frac_positive_margin"] == pytest.approx(np.mean(t > n), abs=1e-12)
    assert 0 < got["frac_positive_margin"] < 1  # both outcomes occur: the fraction is exercised
    f32 = figures.nn_margin_histograms(
        torch.from_numpy(train).float(),
        ytr,
        torch.from_numpy(test).float(),
        yte,
        tmp_path / "f.png",
    )
    assert f32["mean_margin"] == pytest.approx(got["mean_margin"], abs=1e-5)


def test_nn_margins_need_every_test_class_in_training(tmp_path):
    train, ytr = blobs(5, n=30)
    with pytest.raises(ValueError, match="absent from training"):
        figures.nn_margin_histograms(train, ytr % 2, train, ytr, tmp_path / "m.png")


# ---- kappa vs correctness: Mann-Whitney U ----


def test_kappa_mann_whitney_matches_numpy_and_scipy(tmp_path):
    rng = np.random.default_rng(6)
    correct = rng.random(150) < 0.7
    kappa = np.round(rng.gamma(2.0, 1.0, 150) + correct, 1)  # rounding makes ties
    got = figures.kappa_histograms(kappa, correct, tmp_path / "k.png")
    assert_png(tmp_path / "k.png")
    kc, kw = kappa[correct], kappa[~correct]
    u = np.sum(kc[:, None] > kw[None, :]) + 0.5 * np.sum(kc[:, None] == kw[None, :])
    assert got["u"] == pytest.approx(u, abs=1e-9)
    assert got["effect_size"] == pytest.approx(u / (len(kc) * len(kw)), abs=1e-12)
    ref = stats.mannwhitneyu(kc, kw, alternative="two-sided")
    assert got["p_value"] == pytest.approx(ref.pvalue, rel=1e-12)
    assert got["mean_correct"] == pytest.approx(kc.mean()) and got["n_wrong"] == len(kw)
    assert got["mean_wrong"] == pytest.approx(kw.mean()) and got["n_correct"] == len(kc)


def test_kappa_histograms_with_an_empty_group(tmp_path):
    got = figures.kappa_histograms(
        torch.rand(40), torch.ones(40, dtype=torch.bool), tmp_path / "e.png"
    )
    assert_png(tmp_path / "e.png")
    assert got["u"] is None and got["p_value"] is None and "no wrongly" in got["note"]
    assert got["n_wrong"] == 0 and got["mean_wrong"] is None


# ---- kappa vs corruption severity: Spearman (vMF-κ Table 1) ----


def np_avg_ranks(a):
    order = np.argsort(a, kind="stable")
    ranks = np.empty(len(a))
    ranks[order] = np.arange(1, len(a) + 1)
    for v in np.unique(a):  # ties share their mean rank
        ranks[a == v] = ranks[a == v].mean()
    return ranks


def np_spearman(a, b):
    return np.corrcoef(np_avg_ranks(a), np_avg_ranks(b))[0, 1]


def test_kappa_vs_severity_matches_rank_rederivation(tmp_path):
    rng = np.random.default_rng(7)
    clean = np.zeros(40, int)
    sev = np.concatenate([clean, rng.integers(1, 6, 160)])
    kinds = np.array(["clean"] * 40 + ["blur", "noise"] * 80)
    kappa = 10.0 - sev * np.where(kinds == "noise", 1.5, 0.3) + rng.standard_normal(200)
    got = figures.kappa_vs_severity(sev, kappa, tmp_path / "s.png", kinds=list(kinds))
    assert_png(tmp_path / "s.png")
    assert got["spearman_rho"] == pytest.approx(np_spearman(kappa, sev), abs=1e-12)
    assert got["spearman_p"] == pytest.approx(stats.spearmanr(kappa, sev).pvalue, rel=1e-9)
    for s in range(6):
        assert got["mean_kappa_per_severity"][s] == pytest.approx(kappa[sev == s].mean())
        assert got["std_kappa_per_severity"][s] == pytest.approx(kappa[sev == s].std())
    assert set(got["per_kind"]) == {"blur", "noise"}  # "clean" is severity 0, shared by both
    for name in ("blur", "noise"):
        m = (kinds == name) | (sev == 0)
        per = got["per_kind"][name]
        assert per["spearman_rho"] == pytest.approx(np_spearman(kappa[m], sev[m]), abs=1e-12)
        assert per["n"] == m.sum()
        assert per["mean_kappa_per_severity"][0] == pytest.approx(kappa[:40].mean())
    assert got["per_kind"]["noise"]["spearman_rho"] < got["per_kind"]["blur"]["spearman_rho"]


def test_kappa_vs_severity_rejects_out_of_range(tmp_path):
    with pytest.raises(ValueError, match="0..5"):
        figures.kappa_vs_severity([0, 6], [1.0, 2.0], tmp_path / "s.png")


# ---- learning curves from metrics.jsonl ----


def write_metrics(path):
    lines, step = [], 0
    for epoch in range(1, 5):
        losses = []
        for i in range(1, 4):
            step += 5
            losses.append(6.0 / (step + 1))
            lines.append({"kind": "step", "global_step": step, "epoch": epoch - 1 + i / 3,
                          "loss": losses[-1], "lr": 0.1})  # fmt: skip
        rec = {"kind": "epoch", "epoch": epoch, "global_step": step, "loss": float(np.mean(losses))}
        if epoch % 2 == 0:
            rec["knn_top1"] = {2: 61.5, 4: 58.25}[epoch]
        lines.append(rec)
    text = "".join(json.dumps(r) + "\n" for r in lines)
    path.write_text(text + '{"kind": "step", "global_st')  # a line cut by a hard kill
    return lines


def test_learning_curves_match_parsed_file(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    write_metrics(metrics)
    got = figures.learning_curves(metrics, tmp_path / "curves.png")
    assert_png(tmp_path / "curves.png")
    parsed = []
    for line in metrics.read_text().splitlines():
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    steps = [r for r in parsed if r["kind"] == "step"]
    epochs = [r for r in parsed if r["kind"] == "epoch"]
    knn = [(r["knn_top1"], r["epoch"]) for r in epochs if "knn_top1" in r]
    assert got["final_step_loss"] == steps[-1]["loss"]
    assert got["final_loss"] == got["final_epoch_loss"] == epochs[-1]["loss"]
    assert (got["best_knn_top1"], got["best_knn_epoch"]) == max(knn)
    assert (got["last_knn_top1"], got["last_knn_epoch"]) == knn[-1]
    assert got["num_steps_logged"] == len(steps) and got["num_epochs"] == len(epochs)


def test_learning_curves_without_knn_or_epochs(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps({"kind": "step", "global_step": 10, "epoch": 0.5, "loss": 3.0}))
    got = figures.learning_curves(metrics, tmp_path / "c.png")
    assert_png(tmp_path / "c.png")
    assert got["final_loss"] == 3.0 and got["best_knn_top1"] is None


def test_learning_curves_missing_or_empty_file(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        figures.learning_curves(tmp_path / "nope.jsonl", tmp_path / "c.png")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="no step or epoch records"):
        figures.learning_curves(tmp_path / "empty.jsonl", tmp_path / "c.png")
    assert not (tmp_path / "c.png").exists()


# ---- limited labels, one-class AUROC ----


def test_limited_labels_dict_and_rows_agree_with_numpy(tmp_path):
    rng = np.random.default_rng(8)
    table = {n: list(rng.uniform(30, 90, 5)) for n in (1, 2, 5, 10, 50)}
    table[100] = [91.0]
    rows = [{"labels_per_class": n, "accuracy": a} for n, accs in table.items() for a in accs]
    got = figures.limited_labels_plot(table, tmp_path / "l.png")
    assert_png(tmp_path / "l.png")
    assert figures.limited_labels_plot(rows, tmp_path / "r.png") == got
    for n, accs in table.items():
        assert got[n]["mean"] == pytest.approx(np.mean(accs))
        std = np.std(accs, ddof=1) if len(accs) > 1 else 0.0
        assert got[n]["std"] == pytest.approx(std) and got[n]["draws"] == len(accs)


def test_auroc_bars_mean(tmp_path):
    aurocs = {f"class {i}": v for i, v in enumerate(np.linspace(0.6, 0.95, 12))}
    got = figures.auroc_bar_plot(aurocs, tmp_path / "a.png", "one-class AUROC")
    assert_png(tmp_path / "a.png")
    assert got["mean"] == pytest.approx(np.mean(list(aurocs.values())))
    assert figures.auroc_bar_plot(list(aurocs.values()), tmp_path / "b.png", "t")["mean"] == (
        pytest.approx(got["mean"])
    )


# ---- report.md ----


def test_write_report_titles_tables_and_links(tmp_path):
    figures.auroc_bar_plot([0.7, 0.9], tmp_path / "fig dir" / "auroc.png", "t")
    figures.kappa_histograms([1.0, 2.0, 3.0], [True, False, True], tmp_path / "kappa.png")
    rows = [{"method": "moco", "knn_top1": 61.23456, "n": 100, "p": 3.2e-7},
            {"method": "mioc", "knn_top1": 64.5, "n": 12345, "p": None}]  # fmt: skip
    sections = [
        {"title": "Summary", "text": "Numbers from the test.", "table": rows},
        {"title": "AUROC", "figure": "fig dir/auroc.png"},
        {"title": "Kappa", "text": "k", "figure": "kappa.png", "table": [{"u": 1.5}]},
    ]
    path = markdown.write_report(tmp_path, "Evaluation", sections)
    md = path.read_text()
    assert path == tmp_path / "report.md" and md.startswith("# Evaluation\n")
    for s in sections:
        assert f"## {s['title']}" in md
    assert md.index("## Summary") < md.index("## AUROC") < md.index("## Kappa")
    assert "Numbers from the test." in md
    table = [line for line in md.splitlines() if line.startswith("| ")][:4]
    assert len({len(line) for line in table}) == 1  # padded: aligned columns
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table]
    assert cells[0] == ["method", "knn_top1", "n", "p"]
    assert cells[2] == ["moco", "61.23", "100", "3.2e-07"]
    assert cells[3] == ["mioc", "64.5", "12345", ""]
    links = re.findall(r"!\[([^\]]*)\]\(<?([^)>]+)>?\)", md)
    assert links == [("AUROC", "fig dir/auroc.png"), ("Kappa", "kappa.png")]
    for _, link in links:
        assert (tmp_path / link).is_file()


def test_write_report_rejects_a_missing_figure(tmp_path):
    with pytest.raises(ValueError, match="write the figure"):
        markdown.write_report(tmp_path, "t", [{"title": "x", "figure": "absent.png"}])
