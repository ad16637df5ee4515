"""The shared body of ``debiased``, ``hard`` and ``decoupled`` (one file each) in MoCo's layout
(own key, then the queue and the strategy's extras, as ``infonce``), the estimators of
:mod:`pretrain.losses.reweighted`.

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

import torch

from negmine_core.step import Step
from pretrain.losses import reweighted
from pretrain.losses.base import Loss
from pretrain.losses.infonce import moco_logits


class Reweighted(Loss, abc.ABC):
    """Shared: MoCo's logits, the estimator, and the lazily computed diagnostics."""

    capturable = True

    beta = 0.0
    batch_layout = False  # MoCo's own layout, as infonce

    def forward(self, s: Step) -> torch.Tensor:
        logits = moco_logits(
            s.emb.q, s.emb.k, s.queue, self.temperature, s.extra.shared, s.extra.per_query
        )
        # no graph; the queue labels copied: the enqueue after the loss rewrites them in place
        self._seen = (logits.detach(), s.labels, s.queue_labels.clone(), s.queue.shape[0])
        return self.estimate(logits, s)

    @abc.abstractmethod
    def estimate(self, logits: torch.Tensor, s: Step) -> torch.Tensor:
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
