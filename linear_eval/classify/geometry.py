"""The geometry of an embedding, as numbers: a 2-D t-SNE map with the Davies-Bouldin and
Calinski-Harabasz cluster indices ([001] MiOC, Fig. 5), and each test embedding's nearest
same-class ("target") and other-class ("noise") training similarity ([002] SINCERE, Table 1).
``linear_eval.report.figures`` draws them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from sklearn.manifold import TSNE
from sklearn.metrics import calinski_harabasz_score, davies_bouldin_score

ArrayLike = Any  # numpy array, torch tensor or nested sequence


def as_array(x: ArrayLike, name: str, ndim: int, dtype: type = np.float64) -> np.ndarray:
    a = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    a = a.astype(dtype) if dtype is not object else a
    if a.ndim != ndim or a.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty {ndim}-D array, got shape {a.shape}")
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise ValueError(f"{name} has NaN or inf entries; drop them before plotting")
    return a


def as_tensor(x: ArrayLike, name: str) -> torch.Tensor:
    """A floating (N, F) tensor; a torch input keeps its device and dtype (GPU-sized banks)."""
    t = x.detach() if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x, np.float64))
    t = t if t.is_floating_point() else t.double()
    if t.ndim != 2 or t.shape[0] == 0 or not torch.isfinite(t).all():
        raise ValueError(f"{name} must be a non-empty finite 2-D array, got shape {tuple(t.shape)}")
    return t


def same_length(**arrays: np.ndarray) -> None:
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"one value per sample is needed, got lengths {lengths}")


def l2_normalise(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def tsne_map(
    features: ArrayLike, labels: ArrayLike, seed: int = 0, max_points: int = 5000
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, float]]:
    """2-D t-SNE of the L2-normalised features (N, F) and the cluster indices: (map (n, 2), all
    labels (N,), the map's labels (n,), indices). scikit-learn TSNE with PCA init and perplexity
    min(30, (n - 1) / 3); above ``max_points`` a seeded random subset is embedded. Davies-Bouldin
    (lower = tighter clusters) and Calinski-Harabasz (higher) on all normalised features as in
    [001] (``davies_bouldin``, ``calinski_harabasz``) and on the 2-D map (``*_tsne``)."""
    x = l2_normalise(as_array(features, "features", 2))
    y = as_array(labels, "labels", 1, np.int64)
    same_length(features=x, labels=y)
    classes = np.unique(y)
    if not 2 <= len(classes) < len(y):
        raise ValueError(f"DB/CH indices need 2 <= classes < samples, got {len(classes)}/{len(y)}")
    idx = np.arange(len(y))
    if len(y) > max_points:
        idx = np.sort(np.random.default_rng(seed).choice(len(y), max_points, replace=False))
    n = len(idx)
    emb = TSNE(2, perplexity=min(30.0, (n - 1) / 3), init="pca", random_state=seed).fit_transform(
        x[idx]
    )
    out = {
        "davies_bouldin": davies_bouldin_score(x, y),
        "calinski_harabasz": calinski_harabasz_score(x, y),
    }
    sub = y[idx]
    if 2 <= len(np.unique(sub)) < n:
        out |= {
            "davies_bouldin_tsne": davies_bouldin_score(emb, sub),
            "calinski_harabasz_tsne": calinski_harabasz_score(emb, sub),
        }
    out = {k: float(v) for k, v in out.items()} | {"n_points": len(y), "n_tsne_points": n}
    return emb, y, sub, out


def nn_margins(
    train_features: ArrayLike,
    train_labels: ArrayLike,
    test_features: ArrayLike,
    test_labels: ArrayLike,
    chunk: int = 1024,
) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """For each test embedding z and the L2-normalised training bank B ([002] Table 1): target =
    max_{b in B, y_b = y_z} cos(z, b), noise = max_{b in B, y_b != y_z} cos(z, b); returns
    (target, noise, their means, the mean margin and the fraction with margin > 0)."""
    tr = as_tensor(train_features, "train_features")
    te = as_tensor(test_features, "test_features").to(tr)
    ytr = torch.as_tensor(as_array(train_labels, "train_labels", 1, np.int64), device=tr.device)
    yte = torch.as_tensor(as_array(test_labels, "test_labels", 1, np.int64), device=tr.device)
    same_length(train_features=tr, train_labels=ytr)
    same_length(test_features=te, test_labels=yte)
    missing = set(yte.unique().tolist()) - set(ytr.unique().tolist())
    if missing or len(ytr.unique()) < 2:
        raise ValueError(
            f"every test class needs training samples and the bank needs >= 2 classes; "
            f"test classes absent from training: {sorted(missing)}"
        )
    tr, te = torch.nn.functional.normalize(tr, dim=1), torch.nn.functional.normalize(te, dim=1)
    target, noise = [], []
    for rows, y in zip(te.split(chunk), yte.split(chunk)):  # bounded (chunk, N) memory
        sim = rows @ tr.T  # (c, N)
        same = y[:, None] == ytr[None, :]  # (c, N)
        target.append(sim.masked_fill(~same, -math.inf).amax(1))
        noise.append(sim.masked_fill(same, -math.inf).amax(1))
    t, n = torch.cat(target).double().cpu().numpy(), torch.cat(noise).double().cpu().numpy()
    out = {
        "mean_target": float(t.mean()),
        "mean_noise": float(n.mean()),
        "mean_margin": float((t - n).mean()),
        "frac_positive_margin": float((t > n).mean()),
        "n_test": len(t),
    }
    return t, n, out
