"""``loss.name: supcon``: SupCon "out" (Khosla et al. 2020, "Supervised Contrastive Learning",
https://arxiv.org/abs/2004.11362, eq. 2; code HobbitLong/SupContrast) in MoCo's layout: every
candidate with the query's label is a positive and stays in the denominator.

    from pretrain import losses

    step = losses.Step.single(q, k, queue=queue, labels=y, queue_labels=queue_y)
    loss = losses.create("supcon", temperature=0.1, reference_scale=True)(step)

In a config: ``loss: {name: supcon, kwargs: {reference_scale: true}}``.
"""

from __future__ import annotations

import torch

from pretrain.losses.base import register
from pretrain.losses.queue_layout import QueueContrastive, same_label


@register("supcon")
class SupCon(QueueContrastive):
    """SupCon "out" (Khosla et al. 2020, eq. 2): every same-label key is a positive and stays in
    the denominator.

    Args:
        reference_scale: multiply the loss by T/0.07, as HobbitLong/SupContrast's code does.
        contrast_queue: False: the batch alone is the contrast set (``loss.contrast_queue``).
    """

    def positives(
        self, anchor_labels: torch.Tensor, candidate_labels: torch.Tensor, own: torch.Tensor
    ) -> torch.Tensor:
        """P(i): the own key and every candidate with the anchor's label (-1 matches nothing)."""
        return same_label(anchor_labels, candidate_labels, own)

    def __init__(
        self, temperature: float, contrast_queue: bool = True, *, reference_scale: bool = False
    ) -> None:
        super().__init__(temperature, contrast_queue)
        self.reference_scale = reference_scale
