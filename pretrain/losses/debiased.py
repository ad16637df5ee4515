"""``loss.name: debiased``: the debiased contrastive loss (Chuang et al. 2020, "Debiased Contrastive
Learning", https://arxiv.org/abs/2007.00224, eq. 5; code chingyaoc/DCL) in MoCo's layout, the
estimator of :mod:`pretrain.losses.reweighted`.

    from pretrain import losses

    loss = losses.create("debiased", temperature=0.2, tau_plus=0.1)(
        losses.Step.single(q, k, queue=queue))

In a config: ``loss: {name: debiased, kwargs: {tau_plus: 0.1}}``.
"""

from __future__ import annotations

import torch

from negmine_core.step import Step
from pretrain.losses import reweighted
from pretrain.losses.base import register
from pretrain.losses.negative_weighting import Reweighted


@register("debiased")
class Debiased(Reweighted):
    """Debiased contrastive loss (Chuang et al. 2020, eq. 5; chingyaoc/DCL).

    Args:
        tau_plus: the class prior tau+, in [0, 1) (both official repos: 0.1).
    """

    def __init__(self, temperature: float, *, tau_plus: float = reweighted.TAU_PLUS) -> None:
        super().__init__(temperature)
        reweighted.check(tau_plus)
        self.tau_plus = tau_plus

    def estimate(self, logits: torch.Tensor, s: Step) -> torch.Tensor:
        return reweighted.debiased_hard_loss(logits, self.temperature, self.tau_plus)
