"""``loss.name: imix``: i-Mix (Lee et al. 2021, "i-Mix: A Domain-Agnostic Strategy for Contrastive
Representation Learning", ICLR 2021, https://arxiv.org/abs/2010.08887; official code kibok90/imix,
``builder.py`` with ``--imix imixup``, which turns ``--method moco`` into ``mocon``).

The query images are mixed with a partner from the same batch (i-Mix with mixup; equation numbers
not checked here, no access to the paper text: the official ``builder.py`` is what the tests
re-derive):

    λ_i ~ Beta(α, α),  λ_i ← max(λ_i, 1 − λ_i),  x̃_i = λ_i x_i + (1 − λ_i) x_{π(i)}

and each mixed query carries virtual labels over the keys of the batch (the MoCo form,
"mocon": the gathered batch keys then the queue are the contrast set, so the other keys of the
batch are negatives too):

    ℓ_i = λ_i · CE(q̃_i·[k; queue]/T, i) + (1 − λ_i) · CE(q̃_i·[k; queue]/T, π(i))

Official defaults: α = 1, one λ per sample (``share_lam`` off), queue 4096 and T 0.2 on CIFAR
(``main_pretext.py``); we keep ``moco.temperature`` and ``moco.queue_size`` of the recipe (ours).
The partner π(i) is drawn inside i's BatchNorm group: this rank's batch under DDP as in the
official code (``randperm`` of the local batch), a ``model.bn_splits`` chunk in one process, so that
one process with 2 splits equals 2 ranks (λ and the permutation are drawn for the global batch
from the shared RNG; each rank takes its rows). The strategy's extras (shared, per-query) are
further negatives.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

import torch
import torch.nn.functional as F

from negmine_core.step import ONE_PROCESS, Batch, Step, StepContext
from pretrain.losses.base import Loss, contrast_set, register
from pretrain.runtime import dist


def mix_draw(
    batch: int, groups: int, alpha: float, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """λ (B,) = max(λ, 1 − λ) with λ ~ Beta(α, α), and the partner π (B,): a random permutation
    inside each of ``groups`` consecutive chunks of the global batch."""
    a = torch.full((), float(alpha), device=device)  # no host copy; no argument check (a sync)
    lam = torch.distributions.Beta(a, a, validate_args=False).sample((batch,))
    lam = torch.maximum(lam, 1.0 - lam)
    size = batch // groups
    order = torch.rand(groups, size, device=device).argsort(dim=1)
    partner = (order + torch.arange(groups, device=device)[:, None] * size).flatten()
    return lam, partner


def mix(x: torch.Tensor, lam: torch.Tensor, partner: torch.Tensor) -> torch.Tensor:
    """x̃ = λ x + (1 − λ) x[π] over the leading dimension."""
    w = lam.to(x.dtype).view(-1, *[1] * (x.dim() - 1))
    return w * x + (1.0 - w) * x[partner]


def imix_loss(
    logits: torch.Tensor, own: torch.Tensor, partner: torch.Tensor, lam: torch.Tensor
) -> torch.Tensor:
    """Mean of λ CE(logits, own) + (1 − λ) CE(logits, partner) over rows (logits already / T)."""
    logp = F.log_softmax(logits, dim=1)
    rows = torch.arange(logits.shape[0], device=logits.device)
    return -(lam * logp[rows, own] + (1.0 - lam) * logp[rows, partner]).mean()


@register("imix")
class IMix(Loss):
    """i-Mix with mixup (Lee et al. 2021; kibok90/imix, MoCo form ``mocon``): mixed queries with
    virtual labels (own key, partner's key) against the gathered batch keys + queue + extras.

    Args:
        alpha: mixup's Beta(alpha, alpha) parameter, positive (official: 1.0).
        bn_splits: partners are drawn within each BatchNorm group of the batch, at least 1
            (``model.bn_splits``).
    """

    syncs_why = "λ and the partners drawn on the device (Beta without its argument check)"

    capturable = True

    batch_layout = False  # MoCo's layout (the query encoder sees the mixed first view only)

    from_run: ClassVar[tuple[str, ...]] = ("temperature", "bn_splits")

    def __init__(
        self,
        temperature: float,
        *,
        alpha: Annotated[float, "must be positive"] = 1.0,
        bn_splits: Annotated[int, "must be at least 1"] = 1,
    ) -> None:
        super().__init__(temperature)
        if not alpha > 0:
            raise ValueError(f"alpha must be positive, got {alpha}")
        if bn_splits < 1:
            raise ValueError(f"bn_splits must be at least 1, got {bn_splits}")
        self.alpha, self.bn_splits = alpha, bn_splits
        self._draw: tuple[torch.Tensor, torch.Tensor] | None = None

    def transform_batch(self, batch: Batch, ctx: StepContext = ONE_PROCESS) -> Batch:
        """The batch with its query images mixed (:meth:`transform_queries`)."""
        return batch.replace(x1=self.transform_queries(batch.x1))

    def transform_queries(self, x1: torch.Tensor) -> torch.Tensor:
        """Mix this rank's query images (N, ...) with partners of its own BN group."""
        rank, world = dist.rank(), dist.world_size()
        n = x1.shape[0]
        lam, partner = mix_draw(n * world, world * self.bn_splits, self.alpha, x1.device)
        lam, partner = lam[rank * n : (rank + 1) * n], partner[rank * n : (rank + 1) * n]
        self._draw = (lam, partner)  # global indices: the keys' rows in k_all
        return mix(x1, lam, partner - rank * n)

    def forward(self, s: Step) -> torch.Tensor:
        if self._draw is None:
            raise ValueError("imix: transform_queries must mix the query images before the loss")
        lam, partner = self._draw
        self._draw = None
        candidates, cand_labels = contrast_set(s)  # [k_all; queue; shared]
        logits = s.emb.q @ candidates.to(s.emb.q.dtype).T
        if s.extra.per_query is not None:
            private = torch.einsum(
                "nd,nsd->ns", s.emb.q, s.extra.per_query.detach().to(s.emb.q.dtype)
            )
            logits = torch.cat([logits, private], dim=1)
        logits = logits / self.temperature
        own = s.offset + torch.arange(s.emb.q.shape[0], device=s.emb.q.device)
        self._seen = (logits.detach(), own, partner, s.labels, cand_labels.clone())
        return imix_loss(logits, own, partner, lam)

    def diagnostics(self) -> dict[str, torch.Tensor | float]:
        """``effective_negatives``: the columns besides the two virtual targets;
        ``false_negative_fraction``: their share with the query's label; ``contrast_top1``: the
        top column is the own key (%)."""
        seen = getattr(self, "_seen", None)
        if seen is None:
            return {}
        logits, own, partner, labels, cand_labels = seen
        n, m = logits.shape
        cols = torch.arange(m, device=logits.device)
        negative = (cols != own[:, None]) & (cols != partner[:, None])  # (N, M)
        pad = torch.full((m - cand_labels.shape[0],), -1, dtype=torch.long, device=logits.device)
        same = (torch.cat([cand_labels, pad])[None, :] == labels[:, None]) & (labels[:, None] >= 0)
        count = negative.sum(1).float()
        known = (labels >= 0).float()
        frac = (negative & same).sum(1).float() / count
        return {
            "effective_negatives": count.mean(),
            "false_negative_fraction": (frac * known).sum() / known.sum().clamp(min=1.0),
            "contrast_top1": (logits.argmax(dim=1) == own).float().mean() * 100.0,
        }
