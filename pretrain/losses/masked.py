"""Masked log-sum-exp and the two positive-set reductions every contrastive loss here shares.

A loss is described by a logit matrix (A anchors x M candidates) and boolean masks over it, so
that the multiview (2N x 2N) and the MoCo queue layout (N x (keys + queue)) differ only in how
the masks are built. Nothing here puts -inf into a tensor that is multiplied or back-propagated:
masked entries are replaced by 0 with ``torch.where`` before ``exp`` and dropped after it, so
0 * (-inf) = NaN (the bug of ``FIRMLossv2`` in Willtl/firm, the code of Lunardi et al. 2025,
FIRM, eq. 2) cannot happen and gradients stay finite.
"""

from __future__ import annotations

import torch

#: SupContrast's fixed base temperature: its code multiplies the loss by temperature / 0.07.
REFERENCE_BASE_TEMPERATURE = 0.07


def check_temperature(temperature: float) -> None:
    """Raise if ``temperature`` cannot scale a logit: the one temperature check, called by
    every loss function and once by each registered loss module."""
    if not temperature > 1e-3:
        raise ValueError(f"temperature must be above 1e-3, got {temperature}")


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; bf16/fp16 are upcast to float32, as ``info_nce`` does."""
    return torch.promote_types(dtype, torch.float32)


def masked_logsumexp(logits: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise log Σ_{j: mask[i, j]} exp(logits[i, j]), stable and NaN-free.

    The shift is the detached maximum over the masked entries of each row, so every kept
    ``exp`` is <= 1 and at least one equals 1 (no underflow to log 0 whatever the temperature).

    Args:
        logits: (A, M) finite logits.
        mask: (A, M) bool, the entries that enter the sum.

    Returns:
        ``(lse, nonempty)``: lse (A,) with 0 in rows whose mask is empty (never -inf), and the
        (A,) bool mask of the non-empty rows.
    """
    nonempty = mask.any(dim=1)
    floor = torch.finfo(logits.dtype).min
    shift = torch.where(mask, logits.detach(), floor).amax(dim=1, keepdim=True)  # (A, 1)
    shift = torch.where(nonempty.unsqueeze(1), shift, 0.0)
    shifted = torch.where(mask, logits - shift, 0.0)  # (A, M), masked entries -> 0 before exp
    total = torch.where(mask, torch.exp(shifted), 0.0).sum(dim=1)  # (A,), >= 1 where nonempty
    total = torch.where(nonempty, total, 1.0)
    return torch.log(total) + shift.squeeze(1), nonempty


def mean_over_positives(per_pair: torch.Tensor, positive: torch.Tensor) -> torch.Tensor:
    """Mean over anchors of the mean over each anchor's positives of ``per_pair`` (A, M).

    An anchor without any positive contributes 0 but still counts in the mean over anchors
    (SupContrast's post-"nan fix" convention); with the layouts of this package every anchor has
    at least its own other view, so this never happens in practice.
    """
    count = positive.sum(dim=1)  # (A,)
    summed = torch.where(positive, per_pair, 0.0).sum(dim=1)  # (A,)
    return (summed / count.clamp(min=1).to(per_pair.dtype)).mean()


def denominator_loss(
    logits: torch.Tensor,
    positive: torch.Tensor,
    contrast: torch.Tensor | None,
    own: torch.Tensor | None = None,
) -> torch.Tensor:
    """Σ-over-positives form shared by NT-Xent, SupCon "out" and FIRM.

    ℓ_i = (1/|P(i)|) Σ_{p ∈ P(i)} [log Σ_{a ∈ A(i)} e^{l_ia} − l_ip], mean over anchors i.

    Args:
        logits: (A, M) finite logits z_i·z_j / τ.
        positive: (A, M) bool, P(i); must be a subset of ``contrast``.
        contrast: (A, M) bool, A(i), the denominator; None = every column (a plain
            ``logsumexp``: the same max-shifted sum, fewer ops).
        own: (A,) long, when P(i) is exactly {own[i]} (NT-Xent): ℓ_i = lse_i − l_i,own[i] by a
            gather, which is what the mean over one positive computes.
    """
    if contrast is None:
        lse = torch.logsumexp(logits, dim=1)  # (A,)
    else:
        lse, _ = masked_logsumexp(logits, contrast)  # (A,)
    if own is not None:
        return (lse - logits.gather(1, own.unsqueeze(1)).squeeze(1)).mean()
    return mean_over_positives(lse.unsqueeze(1) - logits, positive)


def sincere_loss(
    logits: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor
) -> torch.Tensor:
    """SINCERE's per-positive denominator (eq. 12 of [0]), mean over positives then anchors.

    ℓ(i, p) = −log[e^{l_ip} / (e^{l_ip} + Σ_{n ∈ N(i)} e^{l_in})] = log(1 + e^{lse_N(i) − l_ip}),
    evaluated as ``logaddexp(0, lse_N − l_ip)``; an anchor with no negative gives 0 exactly.

    [0] Feeney & Hughes, "SINCERE: Supervised Information Noise-Contrastive Estimation
        REvisited", 2023, https://arxiv.org/abs/2309.14277

    Args:
        logits: (A, M) finite logits.
        positive: (A, M) bool, P(i).
        negative: (A, M) bool, N(i); disjoint from ``positive``.
    """
    lse_neg, has_neg = masked_logsumexp(logits, negative)  # (A,)
    gap = lse_neg.unsqueeze(1) - logits  # (A, M)
    per_pair = torch.logaddexp(torch.zeros_like(gap), gap)
    per_pair = torch.where(has_neg.unsqueeze(1), per_pair, 0.0)
    return mean_over_positives(per_pair, positive)
