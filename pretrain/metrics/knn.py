"""The weighted cosine kNN classifier and s_con, the one implementation that the training monitor
(:mod:`pretrain.engine.monitor`) and ``linear_eval`` share, so a monitor number and an evaluation
number are computed alike.

``knn_predict`` is the InstDisc vote (Wu et al. 2018, https://arxiv.org/abs/1805.01978, Eq. 7-8 as
in zhirongw/lemniscate.pytorch ``test.py`` and the MoCo CIFAR colab): the k most similar training
features vote for their class with weight exp(sim / T); features are L2-normalised first.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


@torch.no_grad()
def knn_votes(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    k: int,
    temperature: float | None,
    num_classes: int,
    chunk: int = 1024,
) -> torch.Tensor:
    """Class votes Σ_{j ∈ topk(i)} exp(cos(f_i, f_j) / T) · [y_j = c] of the weighted cosine kNN,
    or with ``temperature=None`` one vote per neighbour (SINCERE's majority vote).

    Args:
        train_features: (N, F) memory bank. train_labels: (N,) in [0, num_classes).
        test_features: (M, F) queries. k: neighbours (capped at N). temperature: T, or None.

    Returns:
        (M, C) votes; the prediction is their argmax (ties: the smallest class index).
    """
    bank = F.normalize(train_features.float(), dim=1)
    train_labels = train_labels.to(bank.device)
    k = min(k, bank.shape[0])
    out = []
    for part in F.normalize(test_features.float().to(bank.device), dim=1).split(chunk):
        sim, idx = (part @ bank.T).topk(k, dim=1)  # (m, k)
        weight = torch.ones_like(sim) if temperature is None else (sim / temperature).exp()
        votes = torch.zeros(part.shape[0], num_classes, dtype=weight.dtype, device=weight.device)
        out.append(votes.scatter_add_(1, train_labels[idx], weight))  # (m, C)
    return torch.cat(out)


def knn_predict(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    k: int,
    temperature: float,
    num_classes: int,
) -> torch.Tensor:
    """Predicted labels (M,) of the weighted cosine kNN (see :func:`knn_votes`)."""
    return knn_votes(
        train_features, train_labels, test_features, k, temperature, num_classes
    ).argmax(1)


def knn_top1(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    test_labels: torch.Tensor,
    k: int,
    temperature: float,
    num_classes: int,
) -> float:
    """Top-1 accuracy in percent of :func:`knn_predict`."""
    pred = knn_predict(train_features, train_labels, test_features, k, temperature, num_classes)
    return 100.0 * (pred == test_labels).float().mean().item()


@torch.no_grad()
def s_con(bank: torch.Tensor, test: torch.Tensor, k: int, chunk: int = 2048) -> torch.Tensor:
    """s_con (FIRM eq. 3): the mean of the k largest cosine similarities of each test feature
    to the bank, both L2-normalised (M,), in the inputs' dtype; bank and test tiled in ``chunk``
    blocks (a running top-k), so a 1.3M-image bank never meets the whole test set at once. The
    one implementation: the one-class monitor and ``linear_eval``'s ``knn_score`` call it."""
    if not 1 <= k <= bank.shape[0]:
        raise ValueError(f"k must be in [1, {bank.shape[0]}] (the bank size), got {k}")
    if chunk < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk}")
    bank, test = F.normalize(bank, dim=1), F.normalize(test, dim=1)
    out = []
    for q in test.split(chunk):
        best = q.new_empty(q.shape[0], 0)  # (m, <= k) running top-k similarities
        for start in range(0, bank.shape[0], chunk):
            sim = q @ bank[start : start + chunk].T  # (m, c)
            best = torch.cat([best, sim.topk(min(k, sim.shape[1]), dim=1).values], dim=1)
            best = best.topk(min(k, best.shape[1]), dim=1).values
        out.append(best.mean(1))
    return torch.cat(out)


def one_class_auroc(
    bank: torch.Tensor,
    test: torch.Tensor,
    test_labels: torch.Tensor,
    in_classes: list[int],
    k: int = 1,
) -> float:
    """AUROC (%) of :func:`s_con` (mean of the top-k cosine similarities to the bank of
    in-distribution training features), test images of ``in_classes`` being the positive class.
    The training monitor of one-class runs; ``linear_eval.detect.scores`` has the full set of
    scores (and the per-class protocol)."""
    from sklearn.metrics import roc_auc_score

    score = s_con(bank.float(), test.float(), k)
    is_id = torch.isin(test_labels, torch.as_tensor(in_classes))
    if is_id.all() or not is_id.any():
        return float("nan")
    return 100.0 * float(roc_auc_score(is_id.numpy(), score.numpy()))
