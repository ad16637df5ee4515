"""Negative re-weighting losses: debiased (Chuang et al. 2020), hard (Robinson et al. 2021) and
decoupled (Yeh et al. 2022), as one estimator on logits whose column 0 is the positive.

With s_p the positive logit and s_j (j = 1..M) the negatives' (already divided by T):

- debiased, eq. 5 of [0] (chingyaoc/DCL ``main.py``): ℓ = −log(e^{s_p} / (e^{s_p} + Ng)) with
  Ng = max((Σ_j e^{s_j} − τ⁺ M e^{s_p}) / (1 − τ⁺), M e^{−1/T}).
- hard, eq. 7 of [1] (joshr17/HCL ``image/main.py``): the same with Σ_j e^{s_j} replaced by the
  importance-weighted Σ_j w_j e^{s_j}, w_j = e^{β s_j} / mean_k e^{β s_k} (weights of mean 1);
  β = 0 is debiased, and τ⁺ = 0, β = 0 is InfoNCE.
- decoupled, eq. 6 of [2]: the positive leaves the denominator, ℓ = −w s_p + log Σ_j e^{s_j};
  w = 1 (DCL) or, with σ, the von Mises-Fisher weight of DCLW, w_i = 2 − B e^{p_i/σ} / Σ_b e^{p_b/σ}
  with p_i the positive cosine of pair i over the (global) batch of B pairs. By default w is a
  constant (no gradient flows through it), as lightly's ``negative_mises_fisher_weights`` [3]
  computes it from detached outputs; ``weight_grad=True`` differentiates through w. The paper does
  not say which; the code lightly cites [4] keeps the gradient but uses w = 2 − e^{p_i/σ} /
  Σ_b e^{p_b/σ} (no factor B: w ≈ 2 − 1/B, a different weight) and sums the two directions
  (twice our mean), which neither setting equals.

M is the number of negatives in the contrast set: 2N − 2 in the papers' 2N x 2N layout (the
reference forms in ``tests/helpers/multiview.py``), the queue plus the strategy's extras in MoCo's
layout. Computed in log space (log-sum-exp, log1p), so the floor and the difference never overflow
at small T; the official code exponentiates directly, which agrees wherever that is finite (tested).

[0] Chuang et al., "Debiased Contrastive Learning", NeurIPS 2020, https://arxiv.org/abs/2007.00224
[1] Robinson et al., "Contrastive Learning with Hard Negative Samples", ICLR 2021,
    https://arxiv.org/abs/2010.04592
[2] Yeh et al., "Decoupled Contrastive Learning", ECCV 2022, https://arxiv.org/abs/2110.06848
[3] lightly ``lightly/loss/dcl_loss.py`` (``DCLWLoss``, ``negative_mises_fisher_weights``),
    https://github.com/lightly-ai/lightly
[4] https://github.com/raminnakhli/Decoupled-Contrastive-Learning ``loss.py``
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

TAU_PLUS = 0.1  # both official repos' default class prior
BETA = 1.0  # HCL's default concentration


def check(tau_plus: float, beta: float = 0.0, sigma: float | None = None) -> None:
    if not 0.0 <= tau_plus < 1.0:
        raise ValueError(f"tau_plus must lie in [0, 1), got {tau_plus}")
    if not beta >= 0.0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if sigma is not None and not sigma > 0:
        raise ValueError(f"sigma must be positive (or None), got {sigma}")


def log_negative_mass(
    pos: torch.Tensor, neg: torch.Tensor, temperature: float, tau_plus: float, beta: float = 0.0
) -> torch.Tensor:
    """log Ng (R,) of the debiased / hard estimator: ``pos`` (R,) and ``neg`` (R, M) logits (/T);
    entries of ``neg`` at -inf are not negatives (the multiview layout masks self and partner),
    and M counts the finite ones."""
    m = torch.isfinite(neg).sum(dim=1).to(neg.dtype)  # (R,) on the device: no sync
    log_m = m.log()
    if beta:
        log_sum = (
            torch.logsumexp((1.0 + beta) * neg, dim=1) - torch.logsumexp(beta * neg, dim=1) + log_m
        )
    else:
        log_sum = torch.logsumexp(neg, dim=1)
    if tau_plus:
        b = math.log(tau_plus) + log_m + pos  # log(τ⁺ M e^{s_p})
        gap = (b - log_sum).clamp(max=-1e-6)  # finite, with finite gradients, in both branches
        diff = log_sum + torch.log1p(-gap.exp())  # log(e^a − e^b), a = log_sum > b
        diff = torch.where(b < log_sum - 1e-6, diff, torch.full_like(diff, -torch.inf))
        log_ng = diff - math.log1p(-tau_plus)
    else:
        log_ng = log_sum
    return torch.maximum(log_ng, log_m - 1.0 / temperature)  # the floor M e^{-1/T}


def debiased_hard_loss(
    logits: torch.Tensor, temperature: float, tau_plus: float, beta: float = 0.0
) -> torch.Tensor:
    """Mean over rows of −log(e^{s_p} / (e^{s_p} + Ng)); ``logits`` (R, 1 + M), positive first."""
    pos, neg = logits[:, 0], logits[:, 1:]
    return F.softplus(log_negative_mass(pos, neg, temperature, tau_plus, beta) - pos).mean()


def vmf_weights(
    pos_cosine: torch.Tensor, sigma: float, *, weight_grad: bool = False
) -> torch.Tensor:
    """DCLW's w_i = 2 − B softmax_i(p_i / σ) over the B pairs (mean 1).

    Constant by default (``pos_cosine`` detached, as lightly's DCLWLoss [3]); ``weight_grad=True``
    lets the gradient flow through w into the positives."""
    if not weight_grad:
        pos_cosine = pos_cosine.detach()
    return 2.0 - pos_cosine.shape[0] * torch.softmax(pos_cosine / sigma, dim=0)


def decoupled_loss(logits: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over rows of −w s_p + log Σ_j e^{s_j}; ``logits`` (R, 1 + M), positive first."""
    pos = logits[:, 0] if weight is None else weight * logits[:, 0]
    return (torch.logsumexp(logits[:, 1:], dim=1) - pos).mean()


def negative_weights(neg: torch.Tensor, beta: float) -> torch.Tensor:
    """The weights each estimator puts on its negatives (R, M), mean 1 per row: HCL's
    e^{β s_j} / mean e^{β s}, uniform for β = 0 (debiased, decoupled)."""
    return torch.softmax(beta * neg, dim=1) * neg.shape[1]


def diagnostics(
    neg: torch.Tensor, beta: float, labels: torch.Tensor | None, neg_labels: torch.Tensor | None
) -> dict[str, torch.Tensor]:
    """``effective_negatives``: (Σ w)² / Σ w² per row, mean over rows (M for uniform weights);
    ``false_negative_fraction``: Σ_j w_j [y_j = y_i] / Σ_j w_j over rows with a known label."""
    w = negative_weights(neg.detach().float(), beta)
    out = {"effective_negatives": (w.sum(1).square() / w.square().sum(1)).mean()}
    if labels is not None and neg_labels is not None:
        same = (neg_labels == labels[:, None]) & (labels[:, None] >= 0)  # (R, M)
        known = (labels >= 0).float()
        frac = (w * same).sum(1) / w.sum(1)
        out["false_negative_fraction"] = (frac * known).sum() / known.sum().clamp(min=1.0)
    return out


def floored_fraction(
    logits: torch.Tensor, temperature: float, tau_plus: float, beta: float = 0.0
) -> torch.Tensor:
    """Share of rows whose debiased / hard estimate Ng sits at its floor M e^{-1/T}: there the
    negatives pass no gradient (at small T and large M the τ⁺ M e^{s_p} term exceeds their mass)."""
    pos, neg = logits[:, 0], logits[:, 1:]
    log_ng = log_negative_mass(pos, neg, temperature, tau_plus, beta)
    floor = torch.isfinite(neg).sum(dim=1).to(neg.dtype).log() - 1.0 / temperature
    return (log_ng <= floor).float().mean()


def moco_diagnostics(
    logits: torch.Tensor, labels: torch.Tensor, queue_labels: torch.Tensor, beta: float = 0.0
) -> dict[str, torch.Tensor]:
    """:func:`diagnostics` on MoCo's logits (R, 1 + K + extras), positive first: the queue's
    labels, the strategy's extras unlabelled (synthetic); ``contrast_top1`` besides."""
    n, k = logits.shape[0], queue_labels.shape[0]
    unknown = torch.full((n, logits.shape[1] - 1 - k), -1, dtype=torch.long, device=logits.device)
    neg_labels = torch.cat([queue_labels.expand(n, -1), unknown], dim=1)
    out = diagnostics(logits[:, 1:], beta, labels, neg_labels)
    out["contrast_top1"] = (logits.argmax(dim=1) == 0).float().mean() * 100.0
    return out
