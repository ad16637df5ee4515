"""L2-regularised multinomial logistic regression on frozen features by full-batch L-BFGS: the fast
linear probe for small data.

The fixed-feature protocol of Kornblith et al. 2019 (https://arxiv.org/abs/1805.08974, §3.1) and
SimCLR's transfer appendix (https://arxiv.org/abs/2002.05709, B.8): multinomial logistic regression
with an L2 penalty chosen on held-out training data, solved with L-BFGS. We minimise over
W (C, F) and b (C,)

    L(W, b) = (1/N) Σ_i −log softmax(W x̂_i + b)[y_i] + (λ/2) ‖W‖²_F,   x̂ = (x − μ) / σ,

μ and σ the per-dimension mean and (biased) standard deviation of the training features (a
dimension with σ < 1e-8 keeps σ = 1). This is scikit-learn's ``LogisticRegression(C=1/(λN))`` on
x̂ (the bias is not penalised there either).

Choosing λ: a stratified, seeded 20% of the training features is held out, one model per λ in
:data:`L2_GRID` (10⁻⁶ … 1, a decade apart) is fitted on the rest, largest λ first, each starting
from the previous solution; the λ with the highest held-out accuracy wins (ties go to the larger
λ), and the final model is refitted on all training features with it. The standardisation is
folded into the returned ``nn.Linear``, so it takes raw features.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

L2_GRID = (1.0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6)  # λ, strongest first (warm starts)
VAL_FRACTION = 0.2
MAX_ITER = 500
SMALL = 1 << 20  # N·F at or below which a CPU fit runs on one thread
TOLERANCE_GRAD = 1e-5  # L-BFGS stops when max |gradient| falls below this (sklearn's tol: 1e-4)


def within_class_rank(labels: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """(N,) position of each sample in a random order of its own class (0 .. n_c − 1)."""
    perm = torch.randperm(labels.shape[0], generator=generator)
    order = perm[torch.sort(labels.cpu()[perm], stable=True).indices]  # grouped by class, shuffled
    sorted_labels = labels.cpu()[order]
    starts = torch.searchsorted(sorted_labels, sorted_labels, side="left")  # class start per row
    rank = torch.empty_like(order)
    rank[order] = torch.arange(labels.shape[0]) - starts
    return rank


def stratified_split(
    labels: torch.Tensor, fraction: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Boolean masks (train, held-out): floor(fraction · n_c) samples of each class held out
    (none from a class of one sample), seeded."""
    g = torch.Generator().manual_seed(seed)
    rank = within_class_rank(labels, g)
    _, inverse, counts = labels.cpu().unique(return_inverse=True, return_counts=True)
    held = rank < (fraction * counts[inverse]).floor().long()
    return ~held, held


@contextmanager
def _one_thread_if_small(x: torch.Tensor) -> Iterator[None]:
    """L-BFGS on a small CPU problem is hundreds of tiny sequential ops: intra-op threads only
    add synchronisation (measured on a shared 2-core CPU: 0.13 s on one thread, 18 s on two, for
    a 90 × 5 problem); the previous setting is restored afterwards."""
    before = torch.get_num_threads()
    small = x.device.type == "cpu" and x.numel() <= SMALL
    if small:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if small:
            torch.set_num_threads(before)


def _standardisation(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean, std = x.mean(0), x.std(0, unbiased=False)
    return mean, torch.where(std < 1e-8, torch.ones_like(std), std)


def fit(
    x: torch.Tensor,
    y: torch.Tensor,
    num_classes: int,
    l2: float,
    init: tuple[torch.Tensor, torch.Tensor] | None = None,
    max_iter: int = MAX_ITER,
    tolerance: float = TOLERANCE_GRAD,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Minimise L(W, b) above on already standardised features ``x`` (N, F), labels ``y`` (N,).

    Returns:
        W (C, F) and b (C,) in the dtype and on the device of ``x``.
    """
    if l2 < 0:
        raise ValueError(f"the L2 strength must be >= 0, got {l2}")
    n, f = x.shape
    w = torch.zeros(num_classes, f, dtype=x.dtype, device=x.device)
    b = torch.zeros(num_classes, dtype=x.dtype, device=x.device)
    if init is not None:
        w, b = init[0].clone(), init[1].clone()
    w.requires_grad_(True)
    b.requires_grad_(True)
    y = y.to(x.device)
    opt = torch.optim.LBFGS(
        [w, b],
        lr=1.0,
        max_iter=max_iter,
        tolerance_grad=tolerance,
        tolerance_change=1e-12,
        history_size=20,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(x @ w.T + b, y) + 0.5 * l2 * (w * w).sum()  # (1/N) Σ CE + λ/2 ‖W‖²
        loss.backward()
        return loss

    with torch.enable_grad(), _one_thread_if_small(x):
        opt.step(closure)
    return w.detach(), b.detach()


def train(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    seed: int = 0,
    grid: tuple[float, ...] = L2_GRID,
    val_fraction: float = VAL_FRACTION,
) -> tuple[nn.Linear, dict[str, Any]]:
    """Choose λ on a held-out part (see the module docstring), refit on everything.

    Returns:
        an ``nn.Linear`` on raw features (standardisation folded in) and ``{"l2", "val_accuracy"
        (percent per λ), "val_size"}``; with no held-out sample (every class a singleton) λ is the
        grid's middle value and ``val_accuracy`` is empty.
    """
    if not grid:
        raise ValueError("the L2 grid is empty")
    y = labels.to(features.device)
    keep, held = stratified_split(labels, val_fraction, seed)
    keep, held = keep.to(features.device), held.to(features.device)
    val_acc: dict[str, float] = {}
    best = sorted(grid, reverse=True)[len(grid) // 2]
    if held.any():
        mean, std = _standardisation(features[keep])
        xt, xv = (features[keep] - mean) / std, (features[held] - mean) / std
        params, best_acc = None, -1.0
        for l2 in sorted(grid, reverse=True):
            params = fit(xt, y[keep], num_classes, l2, init=params)
            pred = (xv @ params[0].T + params[1]).argmax(1)
            acc = 100.0 * (pred == y[held]).double().mean().item()
            val_acc[f"{l2:g}"] = acc
            if acc > best_acc:  # strict: ties keep the larger λ
                best, best_acc = l2, acc
    mean, std = _standardisation(features)
    w, b = fit((features - mean) / std, y, num_classes, best)
    fc = nn.Linear(features.shape[1], num_classes).to(features.device, features.dtype)
    with torch.no_grad():
        fc.weight.copy_(w / std)  # W x̂ + b = (W/σ) x + (b − (W/σ) μ)
        fc.bias.copy_(b - (w / std) @ mean)
    return fc.requires_grad_(False), {
        "l2": best,
        "val_accuracy": val_acc,
        "val_size": int(held.sum()),
        "val_fraction": val_fraction,
    }
