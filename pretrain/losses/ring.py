"""``loss.name: ring``: conditional negative sampling in a similarity ring (Wu et al. 2021,
"Conditional Negative Sampling for Contrastive Learning of Visual Representations", ICLR 2021,
https://arxiv.org/abs/2010.02037; official code mhw32/contrastive-ring-public, ``MoCoRing``).

Per query, the negatives are sorted by similarity (descending); the ring keeps those between the
inner and the outer percentile (the paper's Ring estimator, §3; equation number not checked
here, no access to the paper text: the official ``MoCoRing`` is what the tests re-derive):

    ring_i = sorted_i[⌊t_in · ⌊t_out · M⌋⌋ : ⌊t_out · M⌋]    (dynamic_inner, the official default)
    ring_i = sorted_i[⌊t_in · M⌋ : ⌊t_out · M⌋]               (dynamic_inner: false)
    ℓ_i = −s_p + log(e^{s_p} + Σ_{j ∈ ring_i} e^{s_j})        (self_negative: the positive stays in
                                                               the denominator, official default)

with s = q·key / T and M the number of negatives (the queue plus the strategy's extras: ours; the
official code has the queue only). Official defaults (``config/pretrain/mocov2/moco_ring.json``):
t_out = t_in = 0.1, dynamic_inner, self_negative, no annealing; K 65536, T 0.07 on ImageNet.

``anneal`` offers the official schedules of the outer threshold (``src/utils/policy.py``), from 1.0
(the whole queue) down to ``thres_outer`` (official: 0.1, hard-coded) over ``max_anneal_epoch``
(official: 100): ``linear`` (continuous in the fractional epoch; the official steps
linspace(0.1, 1, A)[::-1] per iteration), ``step`` (the 10 levels 1.0, 0.9, ..., 0.1, each held
for a tenth of ``max_anneal_epoch``) and ``exponential`` ((1 − t_out)·e^{−decay · iteration} +
t_out, decay 0.1 per *iteration* as the official code has it, so the ring is nearly closed after
~50 steps). The adaptive policies (on the loss or the accuracy) are not offered.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, get_args

import numpy as np
import torch

from negmine_core.conventions import NO_LABEL
from negmine_core.step import Step
from pretrain.losses import reweighted
from pretrain.losses.base import Loss, register
from pretrain.losses.infonce import moco_logits

Anneal = Literal["none", "linear", "step", "exponential"]
ANNEALS = get_args(Anneal)


def band(m: int, thres_outer: float, thres_inner: float, dynamic_inner: bool) -> tuple[int, int]:
    """(inner, outer) column indices of the ring among ``m`` negatives sorted descending, the
    official integer arithmetic (Python ``int`` of the products)."""
    outer = int(thres_outer * m)
    inner = int(thres_inner * outer) if dynamic_inner else int(thres_inner * m)
    return inner, outer


def ring_loss(
    logits: torch.Tensor, inner: int, outer: int, self_negative: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean ring loss over rows of ``logits`` (R, 1 + M), positive in column 0 (already / T), and
    the ring's column indices among the negatives (R, outer − inner)."""
    pos, neg = logits[:, 0], logits[:, 1:]
    top, idx = torch.topk(neg, outer, dim=1, sorted=True)  # = sort(descending)[:, :outer]
    ring, ring_idx = top[:, inner:], idx[:, inner:]
    if self_negative:
        ring = torch.cat([pos.unsqueeze(1), ring], dim=1)
    return (torch.logsumexp(ring, dim=1) - pos).mean(), ring_idx


def outer_threshold(
    anneal: str,
    thres_outer: float,
    epoch: float,
    global_step: int,
    max_anneal_epoch: float,
    decay: float = 0.1,
) -> float:
    """The outer threshold at fractional ``epoch`` / iteration ``global_step`` (see the module
    docstring): from 1.0 down to ``thres_outer``."""
    top, low = 1.0, thres_outer
    if anneal == "none" or epoch >= max_anneal_epoch:
        return low
    if anneal == "linear":
        return top - (top - low) * epoch / max_anneal_epoch
    if anneal == "step":
        levels = np.arange(low, top + 0.1, 0.1)[::-1]  # the official 10 levels for low = 0.1
        i = int(math.floor(epoch / (max_anneal_epoch / len(levels))))
        return float(levels[i]) if i < len(levels) else low
    if anneal == "exponential":
        return (top - low) * math.exp(-decay * global_step) + low
    raise ValueError(f"anneal must be one of {', '.join(ANNEALS)}, got {anneal!r}")


@register("ring")
class Ring(Loss):
    """The Ring estimator (Wu et al. 2021; mhw32/contrastive-ring-public ``MoCoRing``): each query
    contrasts its own key with the negatives in its similarity ring only. Logs the ring size as
    ``effective_negatives`` and the ring's share of same-label negatives.

    Args:
        thres_outer: outer percentile t_out of the ring, in (0, 1] (official: 0.1).
        thres_inner: inner percentile t_in, in [0, 1) (official: 0.1); below ``thres_outer``
            without ``dynamic_inner``.
        dynamic_inner: t_in is a fraction of the outer band (official default), else of all
            negatives.
        self_negative: the positive stays in the denominator (official default).
        anneal: schedule of the outer threshold from 1.0 down to ``thres_outer`` (see the
            module docstring).
        max_anneal_epoch: epochs the annealing takes, positive (official: 100).
        anneal_decay: ``exponential``'s decay per iteration, positive (official: 0.1).
    """

    syncs_why = "the band's columns are Python integers from the shapes"

    capturable = True
    step_state = "its band anneals with the fractional epoch / global step (Python floats)"

    batch_layout = False  # MoCo's own layout

    def __init__(
        self,
        temperature: float,
        *,
        thres_outer: Annotated[float, "must lie in (0, 1]"] = 0.1,
        thres_inner: Annotated[float, "must lie in [0, 1)"] = 0.1,
        dynamic_inner: bool = True,
        self_negative: bool = True,
        anneal: Anneal = "none",
        max_anneal_epoch: float = 100.0,
        anneal_decay: float = 0.1,
    ) -> None:
        super().__init__(temperature)
        if not 0.0 < thres_outer <= 1.0:
            raise ValueError(f"thres_outer must lie in (0, 1], got {thres_outer}")
        if not 0.0 <= thres_inner < 1.0:
            raise ValueError(f"thres_inner must lie in [0, 1), got {thres_inner}")
        if not dynamic_inner and thres_inner >= thres_outer:
            raise ValueError(
                f"thres_inner ({thres_inner}) must be below thres_outer ({thres_outer}) "
                "without dynamic_inner (the official assertion)"
            )
        if anneal not in ANNEALS:
            raise ValueError(f"anneal must be one of {', '.join(ANNEALS)}, got {anneal!r}")
        if not max_anneal_epoch > 0 or not anneal_decay > 0:
            raise ValueError("max_anneal_epoch and anneal_decay must be positive")
        self.thres_outer, self.thres_inner = thres_outer, thres_inner
        self.dynamic_inner, self.self_negative = dynamic_inner, self_negative
        self.anneal, self.max_anneal_epoch, self.anneal_decay = (
            anneal,
            max_anneal_epoch,
            anneal_decay,
        )

    def forward(self, s: Step) -> torch.Tensor:
        logits = moco_logits(
            s.emb.q, s.emb.k, s.queue, self.temperature, s.extra.shared, s.extra.per_query
        )
        m = logits.shape[1] - 1
        t_out = outer_threshold(
            self.anneal,
            self.thres_outer,
            s.ctx.epoch,
            s.ctx.global_step,
            self.max_anneal_epoch,
            self.anneal_decay,
        )
        inner, outer = band(m, t_out, self.thres_inner, self.dynamic_inner)
        if outer <= inner:
            raise ValueError(
                f"ring: the band [{inner}, {outer}) of {m} negatives is empty (thres_outer "
                f"{t_out:g}, thres_inner {self.thres_inner:g}); raise thres_outer or the queue"
            )
        loss, ring_idx = ring_loss(logits, inner, outer, self.self_negative)
        self._seen = (logits.detach(), ring_idx, s.labels, s.queue_labels.clone(), s.queue.shape[0])
        return loss

    def diagnostics(self) -> dict[str, torch.Tensor | float]:
        seen = getattr(self, "_seen", None)
        if seen is None:
            return {}
        logits, ring_idx, labels, queue_labels, k = seen
        m = logits.shape[1] - 1
        unknown = torch.full((m - k,), NO_LABEL, dtype=torch.long, device=logits.device)
        neg_labels = torch.cat([queue_labels, unknown])[ring_idx]  # (N, band)
        out = reweighted.diagnostics(
            torch.zeros_like(ring_idx, dtype=torch.float32), 0.0, labels, neg_labels
        )  # uniform weights over the ring
        out["contrast_top1"] = (logits.argmax(dim=1) == 0).float().mean() * 100.0
        return out
