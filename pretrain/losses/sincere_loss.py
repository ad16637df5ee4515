"""``loss.name: sincere``: SINCERE (Feeney & Hughes, "SINCERE: Supervised Information
Noise-Contrastive Estimation REvisited", https://arxiv.org/abs/2309.14277, eq. 12; SINCERE) in
MoCo's layout: SupCon's positives, but each positive's denominator holds itself and the anchor's
negatives only, so same-class keys are never pushed apart.

    from pretrain import losses

    step = losses.Step.single(q, k, queue=queue, labels=y, queue_labels=queue_y)
    loss = losses.create("sincere", temperature=0.1)(step)
"""

from __future__ import annotations

import torch

from pretrain.losses.base import register
from pretrain.losses.masked import sincere_loss
from pretrain.losses.queue_layout import QueueContrastive, same_label


@register("sincere")
class Sincere(QueueContrastive):
    """SINCERE (Feeney & Hughes 2023, eq. 12): each positive's denominator holds itself and
    other-class keys only, so same-class keys are never pushed apart.

    Args:
        contrast_queue: False: the batch alone is the contrast set (``loss.contrast_queue``).
    """

    def positives(
        self, anchor_labels: torch.Tensor, candidate_labels: torch.Tensor, own: torch.Tensor
    ) -> torch.Tensor:
        """P(i): the own key and every candidate with the anchor's label (-1 matches nothing)."""
        return same_label(anchor_labels, candidate_labels, own)

    def reduce(
        self,
        logits: torch.Tensor,
        positive: torch.Tensor,
        contrast: torch.Tensor | None,
        own: torch.Tensor,
    ) -> torch.Tensor:
        """Each positive's denominator is itself + the anchor's negatives (eq. 12)."""
        contrast = torch.ones_like(positive) if contrast is None else contrast
        return sincere_loss(logits, positive, contrast & ~positive)
