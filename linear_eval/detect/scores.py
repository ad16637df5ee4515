"""Detection scores on frozen features (the papers below: FIRM eqs. 3-7, KNN+, Mahalanobis, CIDER),
plus the one-class protocol.

Every score is a *normality* score, higher = in-distribution, so it feeds
[`linear_eval.records.metrics`][linear_eval.records.metrics] with ID as the positive class. Inputs
are torch tensors or numpy arrays: a bank / training set (N, F) and test features (M, F); the maths
runs in float64 on the device of the inputs (CPU for numpy) and each score is returned as a float64
tensor (M,). Nearest-neighbour scores tile both the test set and the bank in blocks of
``chunk_size`` rows and merge the per-block top-k, so at most chunk_size² similarities exist at
once.

Papers: [0] FIRM (eqs. 3-7); [1] Sun et al. 2022, "Out-of-distribution detection with
deep nearest neighbors" (KNN+), https://arxiv.org/abs/2204.06507; [2] Lee et al. 2018, "A simple
unified framework for detecting OOD samples", https://arxiv.org/abs/1807.03888; [3] CIDER, Ming et
al. 2023, https://arxiv.org/abs/2203.04450, code deeplearning-wisc/cider @ dce8ad3 ``eval_ood.py``;
[4] SSD, Sehwag et al. 2021, https://arxiv.org/abs/2103.12051, code inspire-group/SSD
``eval_ssd.py``; [5] vMF-κ, probabilistic contrastive learning with a κ head.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.svm import OneClassSVM

from linear_eval.records.metrics import auroc
from pretrain.metrics import knn

ArrayLike = torch.Tensor | np.ndarray
CHUNK = 2048


def _features(x: ArrayLike, name: str) -> torch.Tensor:
    """``x`` as a finite, non-empty float64 (N, F) tensor on its own device (CPU for numpy)."""
    t = torch.as_tensor(x).detach().to(torch.float64)
    if t.ndim != 2 or t.shape[0] == 0 or t.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty (N, F) matrix, got shape {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} contains NaN or inf; check the feature extractor")
    return t


def _bank_and_test(
    bank: ArrayLike, test: ArrayLike, k: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    b, t = _features(bank, "train_features"), _features(test, "test_features")
    if b.shape[1] != t.shape[1]:
        raise ValueError(f"feature dims differ: train {b.shape[1]}, test {t.shape[1]}")
    if k is not None and not 1 <= k <= b.shape[0]:
        raise ValueError(f"k must be in [1, {b.shape[0]}] (the bank size), got {k}")
    return b, t.to(b.device)


def _topk(
    bank: torch.Tensor,
    queries: torch.Tensor,
    k: int,
    chunk_size: int,
    similarity: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest ``similarity(query, bank row)`` per query and their bank indices, (M, k) each,
    in descending order; bank and queries are tiled in ``chunk_size`` blocks."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    values, indices = [], []
    for q in queries.split(chunk_size):
        best_v = q.new_empty(q.shape[0], 0)  # (m, ≤k) running top-k
        best_i = torch.empty(q.shape[0], 0, dtype=torch.long, device=q.device)
        for start in range(0, bank.shape[0], chunk_size):
            sim = similarity(q, bank[start : start + chunk_size])  # (m, c)
            v, i = sim.topk(min(k, sim.shape[1]), dim=1)
            v, i = torch.cat([best_v, v], 1), torch.cat([best_i, i + start], 1)
            best_v, pos = v.topk(min(k, v.shape[1]), dim=1)
            best_i = i.gather(1, pos)
        values.append(best_v)
        indices.append(best_i)
    return torch.cat(values), torch.cat(indices)


def _neg_sq_distance(q: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return 2 * q @ b.T - (q * q).sum(1, keepdim=True) - (b * b).sum(1)  # (m, c) = −‖q − b‖²


def _kth_distance(bank: torch.Tensor, test: torch.Tensor, k: int, chunk_size: int) -> torch.Tensor:
    """‖x − b_(k)‖ (M,), the Euclidean distance to the k-th nearest bank row, recomputed directly
    on the selected neighbour (the expanded −‖q−b‖² only ranks)."""
    _, idx = _topk(bank, test, k, chunk_size, _neg_sq_distance)
    return (test - bank[idx[:, -1]]).norm(dim=1)


def knn_score(
    train_features: ArrayLike, test_features: ArrayLike, k: int, chunk_size: int = CHUNK
) -> torch.Tensor:
    """s_con (eq. 3 in [0]): mean of the top-k cosine similarities of f(x) to the bank, both sides
    L2-normalised; no self-exclusion (the test points are not in the bank). FIRM's code: faiss
    ``IndexFlatIP`` on normalised features, mean of the top-k inner products. Returns (M,)."""
    bank, test = _bank_and_test(train_features, test_features, k)
    return knn.s_con(bank, test, k, chunk_size)


def knn_score_norm(
    train_features: ArrayLike, test_features: ArrayLike, k: int, chunk_size: int = CHUNK
) -> torch.Tensor:
    """s_con* (eq. 4 in [0]) = s_con · ‖f(x)‖, the raw (unnormalised) norm of the test feature."""
    test = _features(test_features, "test_features")
    s_con = knn_score(train_features, test, k, chunk_size)
    return s_con * test.norm(dim=1).to(s_con.device)


def knn_plus(
    train_features: ArrayLike, test_features: ArrayLike, k: int, chunk_size: int = CHUNK
) -> torch.Tensor:
    """KNN+ ([1], CIDER's default score): −‖ẑ − ẑ_(k)‖, minus the Euclidean distance from the
    normalised test feature to its k-th nearest normalised bank feature. (The reference code
    takes faiss ``IndexFlatL2``'s *squared* distance: monotone, so every metric is unchanged.)"""
    bank, test = _bank_and_test(train_features, test_features, k)
    return -_kth_distance(F.normalize(bank, dim=1), F.normalize(test, dim=1), k, chunk_size)


def ensemble_knn_score(
    train_list: Sequence[ArrayLike],
    test_list: Sequence[ArrayLike],
    k: int,
    chunk_size: int = CHUNK,
) -> torch.Tensor:
    """s_shift / s_ens (eqs. 5-6 in [0]): the mean of
    [`knn_score`][linear_eval.detect.scores.knn_score] over paired (bank, test)
    feature sets, one pair per test-time transform (4 rotations with the bank rotated by the same
    angle, or N random crops)."""
    if len(train_list) == 0 or len(train_list) != len(test_list):
        raise ValueError(
            f"need one bank per test set and at least one pair, got {len(train_list)} banks "
            f"and {len(test_list)} test sets"
        )
    scores = [knn_score(b, t, k, chunk_size) for b, t in zip(train_list, test_list)]
    return torch.stack(scores).mean(0)


def center_score(train_features: ArrayLike, test_features: ArrayLike) -> torch.Tensor:
    """−s_center: eq. 7 in [0] is the *anomaly* score 1 − cos(φ(x), c) with c = normalize(mean of
    the normalised train features); like FIRM's code we return its negation, cos(φ(x), c) − 1."""
    bank, test = _bank_and_test(train_features, test_features)
    c = F.normalize(F.normalize(bank, dim=1).mean(0), dim=0)  # (F,)
    return F.normalize(test, dim=1) @ c - 1.0


def _class_means(x: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    classes, inverse, counts = labels.unique(return_inverse=True, return_counts=True)
    sums = torch.zeros(len(classes), x.shape[1], dtype=x.dtype, device=x.device)
    return sums.index_add_(0, inverse, x) / counts[:, None], inverse  # (C, F), (N,)


def _sq_mahalanobis(z: torch.Tensor, means: torch.Tensor, precision: torch.Tensor) -> torch.Tensor:
    """(z − μ_c)ᵀ P (z − μ_c) for every test row and class, (M, C), expanded into three products."""
    zp = z @ precision  # (M, F)
    d2 = (zp * z).sum(1, keepdim=True) - 2 * zp @ means.T + ((means @ precision) * means).sum(1)
    return d2.clamp_min(0.0)


def mahalanobis_fit(
    train_features: ArrayLike,
    train_labels: ArrayLike,
    covariance: Literal["tied", "global", "per_class"] = "tied",
) -> Callable[[ArrayLike], torch.Tensor]:
    """The class means and precision(s) of [`mahalanobis`][linear_eval.detect.scores.mahalanobis],
    computed once; returns the scorer
    ``test_features -> max_c −d²_M`` (M,), so a bank scores any number of test sets."""
    x = _features(train_features, "train_features")
    y = torch.as_tensor(train_labels).to(x.device).reshape(-1)
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"train_labels has {y.shape[0]} entries for {x.shape[0]} features")
    if covariance not in ("tied", "global", "per_class"):
        raise ValueError(f"covariance must be 'tied', 'global' or 'per_class', got {covariance!r}")
    normalise = covariance in ("global", "per_class")
    if normalise:
        x = F.normalize(x, dim=1)
    m = s = None
    if covariance == "per_class":
        m, s = x.mean(0), x.std(0, unbiased=False) + 1e-10
        x = (x - m) / s
    means, inverse = _class_means(x, y)
    if covariance == "tied":
        centred = x - means[inverse]  # (N, F)
        precisions = [torch.linalg.pinv(centred.T @ centred / x.shape[0], hermitian=True)]
    elif covariance == "global":
        precisions = [torch.linalg.pinv(torch.cov(x.T), hermitian=True)]
    else:
        precisions = []
        for c in range(len(means)):  # one precision per class (C of them, not per sample)
            xc = x[inverse == c] - means[c]  # (N_c, F)
            if xc.shape[0] < 2:
                raise ValueError(
                    f"per_class covariance needs >= 2 samples per class; class {c} has 1"
                )
            precisions.append(torch.linalg.pinv(xc.T @ xc / xc.shape[0], hermitian=True))

    def score(test_features: ArrayLike) -> torch.Tensor:
        z = _features(test_features, "test_features").to(x.device, x.dtype)
        if z.shape[1] != x.shape[1]:
            raise ValueError(f"test features have {z.shape[1]} dims, the bank {x.shape[1]}")
        if normalise:
            z = F.normalize(z, dim=1)
        if m is not None:
            z = (z - m) / s
        if len(precisions) == 1:
            return -_sq_mahalanobis(z, means, precisions[0]).min(1).values
        d2 = [_sq_mahalanobis(z, means[c : c + 1], p)[:, 0] for c, p in enumerate(precisions)]
        return -torch.stack(d2, 1).min(1).values

    return score


def mahalanobis(
    train_features: ArrayLike,
    train_labels: ArrayLike,
    test_features: ArrayLike,
    covariance: Literal["tied", "global", "per_class"] = "tied",
) -> torch.Tensor:
    """Class-conditional Gaussian score max_c −d²_M(x, μ_c) (M,); three covariance flavours.

    * ``"tied"``, Lee et al. [2]: class means and one *class-centred* biased covariance
      Σ = (1/N) Σ_i (x_i − μ_{y_i})(x_i − μ_{y_i})ᵀ (their sklearn ``EmpiricalCovariance`` on
      the centred features), precision = pinv(Σ), on the features as given.
    * ``"global"``, CIDER code [3] (``get_mean_prec``): the same class means, but the covariance is
      ``torch.cov`` of *all* features around the *global* mean (unbiased), on L2-normalised
      features (CIDER evaluates normalised penultimate features); precision = pinv.
    * ``"per_class"``, SSD+ [4] (``get_scores_multi_cluster``): features L2-normalised, then
      standardised with the train mean and (biased) std (+1e-10), one biased covariance per class,
      pinv each; the score is −min_c d²_c.

    NOTE: Lee's and CIDER's code use −½ d²; the factor does not change any ranking metric.
    [`mahalanobis_fit`][linear_eval.detect.scores.mahalanobis_fit] is the same, fitted once for many
    test sets.
    """
    _bank_and_test(train_features, test_features)  # the shared shape checks
    return mahalanobis_fit(train_features, train_labels, covariance)(test_features)


def kde_bandwidth(features: torch.Tensor, rule: Literal["scott", "silverman"] = "scott") -> float:
    """Rule-of-thumb bandwidth for one isotropic Gaussian kernel on (N, d) features:
    σ · N^(−1/(d+4)) (Scott) or σ · (N(d+2)/4)^(−1/(d+4)) (Silverman), σ² = the mean over
    dimensions of the unbiased per-dimension variance. (sklearn's "scott"/"silverman" omit σ.)"""
    n, d = features.shape
    if n < 2:
        raise ValueError("a rule-of-thumb bandwidth needs at least 2 training features")
    sigma = features.var(0, unbiased=True).mean().sqrt().item()
    factor = {"scott": n, "silverman": n * (d + 2) / 4.0}
    if rule not in factor:
        raise ValueError(f"bandwidth rule must be 'scott' or 'silverman', got {rule!r}")
    return sigma * factor[rule] ** (-1.0 / (d + 4))


def kde_score(
    train_features: ArrayLike,
    test_features: ArrayLike,
    bandwidth: float | Literal["scott", "silverman"] | None = None,
    chunk_size: int = CHUNK,
) -> torch.Tensor:
    """Gaussian KDE log-density of the L2-normalised test features under the normalised bank:
    log[(1/N) Σ_j N(z; b_j, h² I)] (M,), equal to sklearn ``KernelDensity(kernel="gaussian")``.

    ``bandwidth`` h: a float, or a rule of
    [`kde_bandwidth`][linear_eval.detect.scores.kde_bandwidth] on the normalised bank (None =
    "scott"). The sum over the bank is a running logsumexp over bank blocks.
    """
    bank, test = _bank_and_test(train_features, test_features)
    bank, test = F.normalize(bank, dim=1), F.normalize(test, dim=1)
    if bandwidth is None or isinstance(bandwidth, str):
        h = kde_bandwidth(bank, bandwidth or "scott")
    else:
        h = float(bandwidth)
    if not h > 0:
        raise ValueError(f"bandwidth must be positive, got {h}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    out = []
    for q in test.split(chunk_size):
        acc = q.new_full((q.shape[0],), -math.inf)  # (m,) running log Σ exp
        for b in bank.split(chunk_size):
            sq = (-_neg_sq_distance(q, b)).clamp_min(0.0)  # (m, c) ‖q − b‖²
            acc = torch.logaddexp(acc, torch.logsumexp(-sq / (2 * h * h), 1))
        out.append(acc)
    n, d = bank.shape
    return torch.cat(out) - math.log(n) - 0.5 * d * math.log(2 * math.pi * h * h)


def ocsvm_fit(train_features: ArrayLike, nu: float = 0.1) -> Callable[[ArrayLike], torch.Tensor]:
    """The linear One-Class SVM of [`ocsvm_score`][linear_eval.detect.scores.ocsvm_score], fitted
    once; returns the scorer."""
    if not 0.0 < nu <= 1.0:
        raise ValueError(f"nu must be in (0, 1], got {nu}")
    bank = _features(train_features, "train_features")
    b = bank.cpu().numpy()
    svm = OneClassSVM(kernel="linear", nu=nu).fit(b / np.linalg.norm(b, axis=1, keepdims=True))

    def score(test_features: ArrayLike) -> torch.Tensor:
        test = _features(test_features, "test_features")
        if test.shape[1] != bank.shape[1]:
            raise ValueError(f"test features have {test.shape[1]} dims, the bank {bank.shape[1]}")
        t = test.cpu().numpy()
        values = svm.decision_function(t / np.linalg.norm(t, axis=1, keepdims=True))
        return torch.from_numpy(np.asarray(values, np.float64)).to(test.device)

    return score


def ocsvm_score(
    train_features: ArrayLike, test_features: ArrayLike, nu: float = 0.1
) -> torch.Tensor:
    """Decision function w·z − ρ (M,) of a linear One-Class SVM (Schölkopf et al. 2001) fitted on
    the L2-normalised bank, sklearn ``OneClassSVM(kernel="linear", nu=nu)`` (libsvm, O(N²)).

    NOTE: libsvm stops at tol = 1e-3, so last-bit changes of the inputs can move the decision
    values by ~1e-3; the features are normalised in numpy (x / ‖x‖) to match a direct sklearn call.
    """
    if not 0.0 < nu <= 1.0:
        raise ValueError(f"nu must be in (0, 1], got {nu}")
    _bank_and_test(train_features, test_features)
    return ocsvm_fit(train_features, nu)(test_features)


def kappa_score(kappa: ArrayLike) -> torch.Tensor:
    """κ alone as the normality score (vMF-κ [5]: higher κ = more certain = more ID), (M,).
    Accepts (M,) or (M, 1)."""
    t = torch.as_tensor(kappa).detach().to(torch.float64)
    if t.ndim == 2 and t.shape[1] == 1:
        t = t[:, 0]
    if t.ndim != 1 or t.numel() == 0 or not torch.isfinite(t).all():
        raise ValueError(f"kappa must be a non-empty finite (M,) or (M, 1), got {tuple(t.shape)}")
    return t


def knn_with_kappa(
    train_features: ArrayLike,
    train_kappa: ArrayLike,
    test_features: ArrayLike,
    test_kappa: ArrayLike,
    k: int = 5,
    chunk_size: int = CHUNK,
) -> torch.Tensor:
    """k-NN score on features concatenated with κ (vMF-κ [5], Table 2, k = 5), (M,).

    Precisely: v = [μ / ‖μ‖, κ] ∈ R^(F+1) (the mean direction normalised, κ appended raw), and the
    score is −‖v − v_(k)‖, minus the Euclidean distance to the k-th nearest bank vector (the KNN+
    form of [1] on the augmented vectors; no re-normalisation after appending κ).
    """
    bank, test = _bank_and_test(train_features, test_features, k)
    kb, kt = kappa_score(train_kappa).to(bank.device), kappa_score(test_kappa).to(bank.device)
    if kb.shape[0] != bank.shape[0] or kt.shape[0] != test.shape[0]:
        raise ValueError("one κ per feature row is needed for both the bank and the test set")
    vb = torch.cat([F.normalize(bank, dim=1), kb[:, None]], 1)  # (N, F+1)
    vt = torch.cat([F.normalize(test, dim=1), kt[:, None]], 1)  # (M, F+1)
    return -_kth_distance(vb, vt, k, chunk_size)


def one_class_auroc(
    train_features: ArrayLike,
    train_labels: ArrayLike,
    test_features: ArrayLike,
    test_labels: ArrayLike,
    score_fn: Callable[[torch.Tensor, torch.Tensor], ArrayLike],
    classes: Sequence[int] | None = None,
) -> dict:
    """One-class protocol: each class in turn is ID, with bank = the train features of that class,
    ID = the test samples of that class and OOD = all other test samples.

    Args:
        score_fn: ``score_fn(bank, test_features)`` → normality scores (M,), e.g.
            ``functools.partial(knn_score, k=5)``.
        classes: the classes to evaluate (default: every label in ``test_labels``).

    Returns:
        ``{"per_class": {class: AUROC in percent}, "mean": mean of those}``.
    """
    x = _features(train_features, "train_features")
    z = _features(test_features, "test_features")
    y = torch.as_tensor(train_labels).reshape(-1).cpu()
    t = torch.as_tensor(test_labels).reshape(-1).cpu()
    if y.shape[0] != x.shape[0] or t.shape[0] != z.shape[0]:
        raise ValueError("train_labels / test_labels must have one label per feature row")
    chosen = t.unique().tolist() if classes is None else list(classes)
    per_class = {}
    for c in chosen:  # one fit per class
        bank = x[(y == c).to(x.device)]
        is_id = t == c
        if bank.shape[0] == 0 or not is_id.any() or is_id.all():
            raise ValueError(f"class {c} needs train samples, ID test samples and OOD test samples")
        s = torch.as_tensor(score_fn(bank, z)).detach().cpu().reshape(-1)
        per_class[int(c)] = 100.0 * auroc(s[is_id], s[~is_id])
    return {"per_class": per_class, "mean": float(np.mean(list(per_class.values())))}


def aulc(steps: ArrayLike | Sequence[float], values: ArrayLike | Sequence[float]) -> float:
    """Normalised area under a learning curve: trapezoid ∫ values d(step) / (last − first step),
    i.e. the mean height of the piecewise-linear curve (same unit as ``values``, e.g. AUROC % over
    checkpoints). ``steps`` must be strictly increasing, with >= 2 points."""
    s = np.asarray(torch.as_tensor(steps).cpu(), np.float64)
    v = np.asarray(torch.as_tensor(values).cpu(), np.float64)
    if s.ndim != 1 or s.shape != v.shape or s.size < 2:
        raise ValueError(f"steps and values must be 1-D of equal length >= 2: {s.shape}, {v.shape}")
    if not (np.diff(s) > 0).all() or not np.isfinite(v).all():
        raise ValueError("steps must be strictly increasing and values finite")
    return float(np.sum(np.diff(s) * (v[1:] + v[:-1]) / 2.0) / (s[-1] - s[0]))
