"""``loss.name: nt_xent``: NT-Xent (SimCLR; Chen et al. 2020, "A Simple Framework for Contrastive
Learning of Visual Representations", https://arxiv.org/abs/2002.05709, eq. 1; FIRM eq. 1) in
MoCo's layout: each query's own key is its only positive, against the batch keys + the queue.

    from pretrain import losses

    loss = losses.create("nt_xent", temperature=0.2)(losses.Step.single(q, k, queue=queue))
"""

from __future__ import annotations

import torch

from pretrain.losses.base import register
from pretrain.losses.masked import denominator_loss
from pretrain.losses.queue_layout import QueueContrastive


@register("nt_xent")
class NTXent(QueueContrastive):
    """NT-Xent (SimCLR; FIRM eq. 1): the own key is the only positive.

    Args:
        contrast_queue: False: the batch alone is the contrast set (``loss.contrast_queue``).
    """

    def reduce(
        self,
        logits: torch.Tensor,
        positive: torch.Tensor,
        contrast: torch.Tensor | None,
        own: torch.Tensor,
    ) -> torch.Tensor:
        """The own key is the only positive, by a gather (an excluded anchor is never its own
        key)."""
        return denominator_loss(logits, positive, contrast, own)
