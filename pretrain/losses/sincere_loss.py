"""``loss.name: sincere``: SINCERE (Feeney & Hughes, "SINCERE: Supervised Information
Noise-Contrastive Estimation REvisited", https://arxiv.org/abs/2309.14277, eq. 12; SINCERE) in
MoCo's layout: SupCon's positives, but each positive's denominator holds itself and the anchor's
negatives only, so same-class keys are never pushed apart.

    from pretrain import losses

    step = losses.StepTensors.single(q, k, queue=queue, labels=y, queue_labels=queue_y)
    loss = losses.create("sincere", temperature=0.1)(step)
"""

from __future__ import annotations

from pretrain.losses.base import register
from pretrain.losses.queue_layout import QueueContrastive


@register("sincere")
class Sincere(QueueContrastive):
    """SINCERE (Feeney & Hughes 2024, eq. 12): each positive's denominator holds itself and
    other-class keys only, so same-class keys are never pushed apart.

    Args:
        contrast_queue: False: the batch alone is the contrast set (``loss.contrast_queue``).
    """

    positives_from = "same_label"
    reduction = "sincere"
