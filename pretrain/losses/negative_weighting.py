"""``loss.name``: ``debiased``, ``hard`` and ``decoupled`` in MoCo's layout (own key, then the queue
and the strategy's extras, as ``infonce``), the estimators of :mod:`pretrain.losses.reweighted`.

Settings come from ``loss.kwargs`` (checked against these signatures): ``tau_plus`` (both official
repos: 0.1), ``beta`` (HCL: 1.0), ``sigma`` (None = DCL; lightly's DCLW: 0.5), ``weight_grad``
(decoupled with sigma: false = DCLW's weights are constants, as lightly's; true = differentiated
through, see :mod:`pretrain.losses.reweighted`). On logging steps
each logs ``effective_negatives`` ((Σw)²/Σw² of its negative weights; the contrast-set size for
the uniform ones) and, where labels are known, ``false_negative_fraction`` (the weighted share of
negatives with the query's label), with ``contrast_top1`` as ``infonce`` does.

NOTE (ours): the official code runs on the 2N x 2N SimCLR batch (STL-10 / CIFAR, T 0.5); in MoCo's
layout M is the queue size plus the extras, and the temperature is ``moco.temperature``. HCL's
``--anneal down`` (beta stepped down to 0 in 9 steps over training) is ``loss.kwargs.anneal: down``.
"""

from __future__ import annotations

import abc
import math
from typing import Any

import numpy as np
import torch

from pretrain.losses import reweighted
from pretrain.losses.infonce import moco_logits
from pretrain.losses.modules import Loss, StepTensors, register
from pretrain.runtime import dist


class _Reweighted(Loss, abc.ABC):
    """Shared: MoCo's logits, the estimator, and the lazily computed diagnostics."""

    beta = 0.0
    batch_layout = False  # MoCo's own layout, as infonce

    def forward(self, s: StepTensors) -> torch.Tensor:
        logits = moco_logits(s.q, s.k, s.queue, self.temperature, s.extra.shared,
                             s.extra.per_query)  # fmt: skip
        # no graph; the queue labels copied: the enqueue after the loss rewrites them in place
        self._seen = (logits.detach(), s.labels, s.queue_labels.clone(), s.queue.shape[0])
        return self.estimate(logits, s)

    @abc.abstractmethod
    def estimate(self, logits: torch.Tensor, s: StepTensors) -> torch.Tensor:
        """The loss from MoCo's logits (column 0 the positive): each subclass's estimator."""

    def diagnostics(self) -> dict[str, torch.Tensor | float]:
        seen = getattr(self, "_seen", None)
        if seen is None:
            return {}
        logits, labels, queue_labels, _ = seen
        out = reweighted.moco_diagnostics(logits, labels, queue_labels, self.beta)
        if getattr(self, "tau_plus", None) is not None:  # debiased, hard: rows at the floor
            out["floored_fraction"] = reweighted.floored_fraction(
                logits, self.temperature, self.tau_plus, self.beta
            )
        return out


@register("debiased")
class Debiased(_Reweighted):
    """Debiased contrastive loss (Chuang et al. 2020, eq. 5; chingyaoc/DCL).

    Args:
        tau_plus: the class prior tau+, in [0, 1) (both official repos: 0.1).
    """

    def __init__(self, temperature: float, *, tau_plus: float = reweighted.TAU_PLUS) -> None:
        super().__init__(temperature)
        reweighted.check(tau_plus)
        self.tau_plus = tau_plus

    def estimate(self, logits: torch.Tensor, s: StepTensors) -> torch.Tensor:
        return reweighted.debiased_hard_loss(logits, self.temperature, self.tau_plus)


@register("hard")
class Hard(_Reweighted):
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

    @classmethod
    def config_kwargs(cls, cfg: Any, num_classes: int) -> dict[str, Any]:
        return {"temperature": cfg.moco.temperature, "epochs": cfg.train.epochs}

    def __init__(
        self, temperature: float, *, tau_plus: float = reweighted.TAU_PLUS,
        beta: float = reweighted.BETA, anneal: str | None = None, epochs: int = 1,
    ) -> None:  # fmt: skip
        super().__init__(temperature)
        reweighted.check(tau_plus, beta)
        if anneal not in (None, "down"):
            raise ValueError(f"anneal must be null or 'down', got {anneal!r}")
        self.tau_plus, self.beta0, self.anneal, self.epochs = tau_plus, beta, anneal, epochs
        self.beta = beta

    def estimate(self, logits: torch.Tensor, s: StepTensors) -> torch.Tensor:
        self.beta = annealed_beta(self.beta0, self.anneal, s.epoch, self.epochs)
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


@register("decoupled")
class Decoupled(_Reweighted):
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

    def estimate(self, logits: torch.Tensor, s: StepTensors) -> torch.Tensor:
        weight = None
        if self.sigma is not None:
            cos = (s.q * s.k).sum(dim=1)  # (N,) this rank's positive cosines
            gather = dist.gather_with_grad if self.weight_grad else dist.gather
            every = gather(cos if self.weight_grad else cos.detach())  # (B,) in rank order
            w = reweighted.vmf_weights(every, self.sigma, weight_grad=self.weight_grad)
            weight = w[s.offset : s.offset + cos.shape[0]]
        return reweighted.decoupled_loss(logits, weight)
