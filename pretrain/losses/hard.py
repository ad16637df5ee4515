"""``loss.name: hard``: the hard-negative contrastive loss (Robinson et al. 2021, "Contrastive
Learning with Hard Negative Samples", https://arxiv.org/abs/2010.04592, eq. 7; code joshr17/HCL)
in MoCo's layout, the estimator of :mod:`pretrain.losses.reweighted`.

    from pretrain import losses

    loss = losses.create("hard", temperature=0.2, tau_plus=0.1, beta=1.0)(
        losses.Step.single(q, k, queue=queue))

In a config: ``loss: {name: hard, kwargs: {beta: 1.0, anneal: down}}``.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import numpy as np
import torch

from negmine_core.step import Step
from pretrain.losses import reweighted
from pretrain.losses.base import register
from pretrain.losses.negative_weighting import Reweighted


@register("hard")
class Hard(Reweighted):
    """Hard-negative contrastive loss (Robinson et al. 2021, eq. 7; joshr17/HCL).

    ``anneal: down`` is the official ``--anneal down``: beta steps through linspace(beta, 0, 9),
    the next value taken after every ⌊epochs / 9⌋-th epoch (the official loop would run out of
    values past the 9th step and stop with StopIteration; we hold 0 there).

    Args:
        tau_plus: the class prior tau+, in [0, 1) (official: 0.1).
        beta: concentration of the hard-negative weights, >= 0 (HCL: 1.0; 0 = debiased).
        anneal: None (a constant beta) or ``down`` (the official ``--anneal down``).
        epochs: the training length the annealing is spread over (``train.epochs``).
    """

    from_run: ClassVar[tuple[str, ...]] = ("temperature", "epochs")

    def __init__(
        self,
        temperature: float,
        *,
        tau_plus: float = reweighted.TAU_PLUS,
        beta: float = reweighted.BETA,
        anneal: Literal["down"] | None = None,
        epochs: int = 1,
    ) -> None:
        super().__init__(temperature)
        reweighted.check(tau_plus, beta)
        if anneal not in (None, "down"):
            raise ValueError(f"anneal must be null or 'down', got {anneal!r}")
        self.tau_plus, self.beta0, self.anneal, self.epochs = tau_plus, beta, anneal, epochs
        self.beta = beta

    def estimate(self, logits: torch.Tensor, s: Step) -> torch.Tensor:
        self.beta = annealed_beta(self.beta0, self.anneal, s.ctx.epoch, self.epochs)
        return reweighted.debiased_hard_loss(logits, self.temperature, self.tau_plus, self.beta)


def annealed_beta(beta: float, anneal: str | None, epoch: float, epochs: int) -> float:
    """HCL's beta during fractional ``epoch`` (0-based) of ``epochs``: ``beta`` without
    annealing; with ``down`` linspace(beta, 0, 9)[max(c − 1, 0)] where c = ⌊epoch⌋ // ⌊epochs/9⌋
    values were drawn so far (capped at the last)."""
    if anneal is None:
        return beta
    period = max(epochs // 9, 1)
    drawn = int(math.floor(epoch)) // period
    return float(np.linspace(beta, 0.0, 9)[min(max(drawn - 1, 0), 8)])
