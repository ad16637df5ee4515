"""``loss.name: decoupled``: the decoupled contrastive loss (Yeh et al. 2022, "Decoupled
Contrastive Learning", https://arxiv.org/abs/2110.06848, eq. 6; lightly's ``DCLLoss`` /
``DCLWLoss``) in MoCo's layout, the estimator of :mod:`pretrain.losses.reweighted`.

    from pretrain import losses

    loss = losses.create("decoupled", temperature=0.2, sigma=0.5)(
        losses.Step.single(q, k, queue=queue))

In a config: ``loss: {name: decoupled, kwargs: {sigma: 0.5}}``.
"""

from __future__ import annotations

import torch

from negmine_core.step import Step
from pretrain.losses import reweighted
from pretrain.losses.base import register
from pretrain.losses.negative_weighting import Reweighted
from pretrain.runtime import dist


@register("decoupled")
class Decoupled(Reweighted):
    """Decoupled contrastive loss (Yeh et al. 2022, eq. 6), weighted (DCLW) with ``sigma``: the
    vMF weights are over the global batch (the positives of every rank, gathered), so 2 ranks
    equal one process. NOTE: lightly computes them over each rank's own batch.

    ``weight_grad=False`` (default): the weights are constants, as lightly's ``DCLWLoss``;
    ``weight_grad=True``: the gradient flows through them (the positives gathered with their
    gradient). Both have the same value.

    Args:
        sigma: the vMF weighting's sigma, positive (lightly's DCLW: 0.5); None = plain DCL.
        weight_grad: differentiate through the weights (needs ``sigma``).
    """

    syncs_why = (
        "the DCLW weights gather the positives (with their gradient under `weight_grad`): a "
        "collective, no host copy"
    )

    def __init__(
        self, temperature: float, *, sigma: float | None = None, weight_grad: bool = False
    ) -> None:
        super().__init__(temperature)
        reweighted.check(0.0, 0.0, sigma)
        if not isinstance(weight_grad, bool):
            raise ValueError(f"weight_grad must be true or false, got {weight_grad!r}")
        if weight_grad and sigma is None:
            raise ValueError("weight_grad needs sigma (DCLW): plain DCL has no weights")
        self.sigma, self.weight_grad = sigma, weight_grad

    def estimate(self, logits: torch.Tensor, s: Step) -> torch.Tensor:
        weight = None
        if self.sigma is not None:
            cos = (s.emb.q * s.emb.k).sum(dim=1)  # (N,) this rank's positive cosines
            gather = dist.gather_with_grad if self.weight_grad else dist.gather
            every = gather(cos if self.weight_grad else cos.detach())  # (B,) in rank order
            w = reweighted.vmf_weights(every, self.sigma, weight_grad=self.weight_grad)
            weight = w[s.offset : s.offset + cos.shape[0]]
        return reweighted.decoupled_loss(logits, weight)
