"""MoCo's InfoNCE as pure functions on tensors; the trainer calls them through
``pretrain.losses.modules`` (``loss.name: infonce``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def moco_logits(
    q: torch.Tensor,
    k: torch.Tensor,
    queue: torch.Tensor,
    temperature: float,
    shared: torch.Tensor | None = None,
    per_query: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logits of MoCo's InfoNCE (Eq. 1 of He et al. 2020), positive in column 0.

    ``[q·k⁺, q·queue, q·shared, q·per_query] / T``.

    Args:
        q: queries (N, D), unit norm.
        k: positive keys (N, D), unit norm.
        queue: negatives shared by every query (K, D), treated as constants.
        temperature: T.
        shared: extra negatives appended for every query (M, D), or None.
        per_query: extra negatives private to each query (N, S, D), or None.

    Returns:
        (N, 1 + K + M + S) logits.
    """
    parts = [
        torch.einsum("nd,nd->n", q, k).unsqueeze(1),  # l_pos: (N, 1)
        torch.einsum("nd,kd->nk", q, queue.detach()),  # l_neg: (N, K)
    ]
    if shared is not None:
        parts.append(torch.einsum("nd,md->nm", q, shared.detach()))  # (N, M)
    if per_query is not None:
        parts.append(torch.einsum("nd,nsd->ns", q, per_query.detach()))  # (N, S)
    return torch.cat(parts, dim=1) / temperature


def info_nce(logits: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy with the positive at index 0: −log softmax(logits)[:, 0]."""
    target = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
    # bf16/fp16 logits are upcast; float64 stays float64 (exact tests, gradcheck)
    return F.cross_entropy(logits.to(torch.promote_types(logits.dtype, torch.float32)), target)
