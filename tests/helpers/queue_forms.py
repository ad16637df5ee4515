"""The functional forms of the queue-layout losses, for the tests: one registered
:class:`pretrain.losses.queue_layout.QueueContrastive` subclass (named by its ``loss.name``, the
``kind``) applied to explicit anchors, candidates, labels and own keys, through its own
``positives`` and ``reduce`` methods. The tests compare these against numpy re-derivations and the
papers' 2N x 2N forms (``multiview.py``)."""

from __future__ import annotations

import torch

from pretrain import losses
from pretrain.losses.masked import REFERENCE_BASE_TEMPERATURE, check_temperature
from pretrain.losses.queue_layout import QueueContrastive, _check_shapes, queue_logits, top1_of

QUEUE_KINDS = ("nt_xent", "supcon", "sincere", "firm")  # the in-tree queue-layout losses


def layout(kind: str) -> QueueContrastive:
    """The registered queue-layout loss ``kind`` (its methods say P(i) and the reduction)."""
    crit = losses.create(kind, temperature=1.0)
    if not isinstance(crit, QueueContrastive):
        raise ValueError(f"kind must be a queue-layout loss, got {kind!r}")
    return crit


def queue_positives(
    kind: str, anchor_labels: torch.Tensor, candidate_labels: torch.Tensor, own: torch.Tensor
) -> torch.Tensor:
    """(N, M) bool positive mask P(i) of each anchor over the candidates, for ``kind``."""
    return layout(kind).positives(anchor_labels, candidate_labels, own)


def queue_contrastive(
    q: torch.Tensor,
    candidates: torch.Tensor,
    anchor_labels: torch.Tensor,
    candidate_labels: torch.Tensor,
    own: torch.Tensor,
    temperature: float,
    kind: str,
    per_query: torch.Tensor | None = None,
    *,
    reference_scale: bool = False,
    exclude: torch.Tensor | None = None,
    detach_candidates: bool = True,
) -> torch.Tensor:
    """The loss ``kind`` of anchors ``q`` (N, D) against ``candidates`` (M, D) (+ ``per_query``
    (N, S, D) private negatives), ``own`` (N,) each anchor's own key; with ``exclude`` (each
    anchor itself among the candidates) and ``detach_candidates=False`` the papers' symmetric
    layout. ``reference_scale``: x τ / 0.07."""
    check_temperature(temperature)
    _check_shapes(q, candidates, anchor_labels, candidate_labels, own, per_query)
    crit = layout(kind)
    positive = crit.positives(anchor_labels, candidate_labels, own)
    logits, positive, contrast = queue_logits(
        q, candidates, positive, temperature, per_query,
        exclude=exclude, detach_candidates=detach_candidates,
    )  # fmt: skip
    loss = crit.reduce(logits, positive, contrast, own)
    return loss * (temperature / REFERENCE_BASE_TEMPERATURE) if reference_scale else loss


def contrast_top1(
    q: torch.Tensor,
    candidates: torch.Tensor,
    anchor_labels: torch.Tensor,
    candidate_labels: torch.Tensor,
    own: torch.Tensor,
    kind: str,
    per_query: torch.Tensor | None = None,
    exclude: torch.Tensor | None = None,
) -> torch.Tensor:
    """Contrast accuracy (%) of ``kind``'s positives P(i) (:func:`queue_layout.top1_of`)."""
    positive = queue_positives(kind, anchor_labels, candidate_labels, own)
    return top1_of(positive, q, candidates, per_query, exclude)
