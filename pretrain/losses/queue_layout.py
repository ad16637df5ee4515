"""The batch contrastive losses in MoCo's layout: query anchors against keys + queue (+ extras).

Anchors are the N queries q (with gradient); the contrast set is a list of M constant candidates
(the batch keys of every rank, then the queue, then shared synthetic negatives), optionally plus
S private negatives per query. With ``l_ij = q_i·c_j / τ`` and P(i) the positives, each loss
overrides :meth:`QueueContrastive.positives` and, where its denominator differs,
:meth:`QueueContrastive.reduce` (one file each):

- ``nt_xent``  P(i) = {own(i)}; denominator all candidates (+ private): MoCo's InfoNCE.
- ``supcon``   P(i) = {own(i)} ∪ {j : y_j = y_i}, eq. 2 of [0]; denominator all candidates.
- ``sincere``  same P(i); each positive's denominator is itself + the anchor's negatives (every
  candidate not in P(i), plus the private ones), eq. 12 of [1].
- ``firm``     P(i) = {own(i)} ∪ {j : y_j >= 0} if y_i >= 0 (in-distribution), else {own(i)},
  eq. 2 of [2]; denominator all candidates.

Labels follow ``negatives.base``: >= 0 known class, NO_LABEL (-1) unknown (matches nothing, not
even another -1), <= -2 synthetic outliers (equal outlier labels, e.g. the same rotation, match
for supcon/sincere). Private negatives are never positives. Loss = mean over anchors of the mean
over positives. With all-distinct labels the three label-aware kinds equal MoCo's InfoNCE.

NOTE: these are the multiview equations transposed to MoCo's asymmetric layout (anchors are
queries only, positives and negatives are momentum keys); the papers define them on a 2N x 2N
batch, which is this module's symmetric layout without a queue (``s.emb.q2``).

[0] Khosla et al., "Supervised Contrastive Learning", https://arxiv.org/abs/2004.11362
[1] Feeney & Hughes, "SINCERE", https://arxiv.org/abs/2309.14277
[2] Lunardi et al. (FIRM), ECAI 2025, https://arxiv.org/abs/2501.05130.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from negmine_core.conventions import NO_LABEL
from negmine_core.step import Step
from pretrain.losses.base import Loss, both_views, contrast_set
from pretrain.losses.masked import (
    REFERENCE_BASE_TEMPERATURE,
    check_temperature,
    compute_dtype,
    denominator_loss,
)


def _check_shapes(
    q: torch.Tensor,
    candidates: torch.Tensor,
    anchor_labels: torch.Tensor,
    candidate_labels: torch.Tensor,
    own: torch.Tensor,
    per_query: torch.Tensor | None,
) -> None:
    if q.dim() != 2 or candidates.dim() != 2 or candidates.shape[1] != q.shape[1]:
        raise ValueError(
            f"q must be (N, D) and candidates (M, D) with the same D, got {tuple(q.shape)} and "
            f"{tuple(candidates.shape)}"
        )
    n, m = q.shape[0], candidates.shape[0]
    if anchor_labels.shape != (n,) or own.shape != (n,):
        raise ValueError(
            f"anchor_labels and own must have shape ({n},), got {tuple(anchor_labels.shape)} and "
            f"{tuple(own.shape)}"
        )
    if candidate_labels.shape != (m,):
        raise ValueError(
            f"candidate_labels must have shape ({m},), one per candidate (NO_LABEL = -1 for "
            f"unknown and synthetic), got {tuple(candidate_labels.shape)}"
        )
    if own.dtype != torch.long:
        raise ValueError(f"own must be a long tensor of candidate indices, got {own.dtype}")
    if per_query is not None and (per_query.dim() != 3 or per_query.shape[::2] != (n, q.shape[1])):
        raise ValueError(
            f"per_query must be (N, S, D) = ({n}, S, {q.shape[1]}), got {tuple(per_query.shape)}"
        )


def own_key(own: torch.Tensor, m: int) -> torch.Tensor:
    """(N, M) bool mask of each anchor's own key. By comparison, not ``positive[rows, own] =
    True``: on CUDA that index_put_ copies its host scalar True to the device first, a blocking
    copy."""
    return own.unsqueeze(1) == torch.arange(m, device=own.device)


def same_label(
    anchor_labels: torch.Tensor, candidate_labels: torch.Tensor, own: torch.Tensor
) -> torch.Tensor:
    """P(i) of SupCon and SINCERE: the own key and every candidate with the anchor's label."""
    positive = own_key(own, candidate_labels.shape[0])  # (N, M)
    a, c = anchor_labels.unsqueeze(1), candidate_labels.unsqueeze(0)  # (N, 1), (1, M)
    positive |= (a == c) & (a != NO_LABEL)
    return positive


def in_distribution(
    anchor_labels: torch.Tensor, candidate_labels: torch.Tensor, own: torch.Tensor
) -> torch.Tensor:
    """P(i) of FIRM: the own key, and every in-distribution candidate for an in-distribution
    anchor."""
    positive = own_key(own, candidate_labels.shape[0])  # (N, M)
    a, c = anchor_labels.unsqueeze(1), candidate_labels.unsqueeze(0)  # (N, 1), (1, M)
    positive |= (a >= 0) & (c >= 0)
    return positive


def queue_logits(
    q: torch.Tensor,
    candidates: torch.Tensor,
    positive: torch.Tensor,
    temperature: float,
    per_query: torch.Tensor | None = None,
    *,
    exclude: torch.Tensor | None = None,
    detach_candidates: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The logits (N, M + S) / τ of anchors against candidates + private negatives, with the
    positive mask and the contrast mask (None: every column) widened to match and ``exclude``
    (each anchor itself) taken out of both.

    Args:
        q: (N, D) unit-norm anchors (carry the gradient).
        candidates: (M, D) unit-norm candidates; detached unless ``detach_candidates`` is False
            (the symmetric layout, whose candidates are the live views).
        positive: (N, M) bool mask P(i); updated in place where ``exclude`` is given.
        temperature: τ.
        per_query: (N, S, D) private negatives of each anchor (detached, never positives).
        exclude: (N,) long index in ``candidates`` of each anchor itself, left out of every
            positive and denominator set; None = the anchors are not among the candidates.
    """
    contrast = None  # every column unless some are excluded
    if exclude is not None:  # scatter_ of a Python scalar: no host scalar copied (see own_key)
        positive.scatter_(1, exclude.unsqueeze(1), False)
        contrast = torch.ones_like(positive).scatter_(1, exclude.unsqueeze(1), False)
    dtype = compute_dtype(q.dtype)
    q = q.to(dtype)
    candidates = candidates.detach() if detach_candidates else candidates
    logits = torch.einsum("nd,md->nm", q, candidates.to(dtype))  # (N, M)
    if per_query is not None:  # (N, S) private negatives: never positive, always contrasted
        private = torch.einsum("nd,nsd->ns", q, per_query.detach().to(dtype))
        logits = torch.cat([logits, private], dim=1)
        positive = torch.cat([positive, positive.new_zeros(private.shape)], dim=1)
        if contrast is not None:
            contrast = torch.cat([contrast, contrast.new_ones(private.shape)], dim=1)
    return logits / temperature, positive, contrast


@torch.no_grad()
def top1_of(
    positive: torch.Tensor,
    q: torch.Tensor,
    candidates: torch.Tensor,
    per_query: torch.Tensor | None = None,
    exclude: torch.Tensor | None = None,
) -> torch.Tensor:
    """Contrast accuracy (%), 0-dim on the device: the share of anchors whose most similar
    candidate (over the contrast set and their private negatives, the anchor itself left out) is
    one of their positives P(i) (the (N, M) mask ``positive``); for NT-Xent that is MoCo's acc@1
    of the own key (``main_moco.py``'s ``accuracy(output, target)``). No host sync."""
    sim = q.detach().float() @ candidates.detach().float().T  # (N, M)
    if exclude is not None:
        sim.scatter_(1, exclude.unsqueeze(1), -torch.inf)
    best, idx = sim.max(dim=1)
    hit = positive.gather(1, idx[:, None])[:, 0]
    if per_query is not None:  # a private negative above every candidate is a miss
        private = torch.einsum("nd,nsd->ns", q.detach().float(), per_query.detach().float())
        hit &= private.max(dim=1).values <= best
    return hit.float().mean() * 100.0


class QueueContrastive(Loss):
    """The shared body of NT-Xent / SupCon / SINCERE / FIRM (one file each): MoCo's layout
    (query anchors against the gathered batch keys + the queue + the strategy's extras, see
    ``pretrain.losses.base``), or with ``s.emb.q2`` the papers' symmetric 2N x 2N layout
    (+ the queue unless ``contrast_queue`` is False). A subclass states its paper's choice by
    overriding [`positives`][pretrain.losses.QueueContrastive.positives] (which candidates are each
    anchor's positives P(i); by default the own key only) and, where the denominator differs,
    [`reduce`][pretrain.losses.QueueContrastive.reduce] (by default each positive against the whole
    contrast set).

    Args:
        contrast_queue: False: the batch alone is the contrast set (no queue); the trainer
            passes ``loss.contrast_queue``.
    """

    capturable = True

    from_run: ClassVar[tuple[str, ...]] = ("temperature", "contrast_queue")
    can_drop_queue = True
    reference_scale = False  # x T/0.07 (SupContrast's hidden factor): supcon's option

    def __init__(self, temperature: float, contrast_queue: bool = True) -> None:
        super().__init__(temperature)
        self.contrast_queue = contrast_queue

    def positives(
        self, anchor_labels: torch.Tensor, candidate_labels: torch.Tensor, own: torch.Tensor
    ) -> torch.Tensor:
        """(N, M) bool mask P(i) of each anchor's positives among the candidates: the own key
        only (``own`` (N,) is the index of each anchor's own key, its view pair). No host
        sync."""
        return own_key(own, candidate_labels.shape[0])

    def reduce(
        self,
        logits: torch.Tensor,
        positive: torch.Tensor,
        contrast: torch.Tensor | None,
        own: torch.Tensor,
    ) -> torch.Tensor:
        """The loss from the logits (N, M + S) / T, the positive mask and the contrast mask
        (None = every column): every positive against the whole contrast set, the mean over
        anchors of the mean over their positives (SupCon eq. 2, FIRM eq. 2)."""
        return denominator_loss(logits, positive, contrast, None)

    def forward(self, s: Step) -> torch.Tensor:
        n, b = s.emb.q.shape[0], s.k_all.shape[0]
        local = s.offset + torch.arange(n, device=s.emb.q.device)
        if s.emb.q2 is None:  # MoCo layout: queries against keys
            candidates, cand_labels = contrast_set(s, self.contrast_queue)
            anchors, anchor_labels, own, exclude = s.emb.q, s.labels, local, None
            detach = True
        else:  # symmetric: row i of [q; q2] against every other view, its partner positive
            anchors, views = both_views(s)
            candidates, cand_labels = contrast_set(s, self.contrast_queue, views)
            anchor_labels = torch.cat([s.labels, s.labels])
            own, exclude = torch.cat([local + b, local]), torch.cat([local, local + b])
            detach = False
        check_temperature(self.temperature)
        _check_shapes(anchors, candidates, anchor_labels, cand_labels, own, s.extra.per_query)
        positive = self.positives(anchor_labels, cand_labels, own)  # (N, M)
        # for contrast_top1 on log steps (no copy; the positive mask before it is widened)
        self._seen = (anchors.detach(), candidates.detach(), positive, s.extra.per_query, exclude)
        logits, positive, contrast = queue_logits(
            anchors,
            candidates,
            positive,
            self.temperature,
            s.extra.per_query,
            exclude=exclude,
            detach_candidates=detach,
        )
        loss = self.reduce(logits, positive, contrast, own)
        if self.reference_scale:
            return loss * (self.temperature / REFERENCE_BASE_TEMPERATURE)
        return loss

    def diagnostics(self) -> dict[str, torch.Tensor | float]:
        """``contrast_top1``: % of anchors whose nearest candidate is one of their positives."""
        seen = getattr(self, "_seen", None)
        if seen is None:
            return {}
        a, c, positive, private, exclude = seen
        return {"contrast_top1": top1_of(positive, a, c, private, exclude)}
