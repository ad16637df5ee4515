"""``loss.name: firm``: FIRM (Lunardi et al., "Contrastive Representation Modeling for Anomaly
Detection", ECAI 2025, eq. 2; code Willtl/firm) in MoCo's layout: in-distribution
anchors (label >= 0) take every in-distribution key as positive, synthetic outliers (label <= -2)
and unlabelled images only their own key.

    from pretrain import losses

    step = losses.Step.single(q, k, queue=queue, labels=y, queue_labels=queue_y)
    loss = losses.create("firm", temperature=0.2, contrast_queue=False)(step)
"""

from __future__ import annotations

import torch

from pretrain.losses.base import register
from pretrain.losses.queue_layout import QueueContrastive, in_distribution


@register("firm")
class Firm(QueueContrastive):
    """FIRM (Lunardi et al., eq. 2): in-distribution anchors (label >= 0) take every in-distribution
    key as positive, synthetic outliers (label <= -2) and unlabelled images only their own key.

    Symmetric without the queue is eq. 2 exactly; MoCo's layout without the queue is the authors'
    training default (their ``FIRMLoss``, view-1 anchors against the N view-2 keys only).

    Args:
        contrast_queue: False: the batch alone is the contrast set (``loss.contrast_queue``).
    """

    def positives(
        self, anchor_labels: torch.Tensor, candidate_labels: torch.Tensor, own: torch.Tensor
    ) -> torch.Tensor:
        """P(i): the own key, and every in-distribution candidate for an in-distribution anchor."""
        return in_distribution(anchor_labels, candidate_labels, own)
