"""``loss.name: align_uniform``: alignment and uniformity on the hypersphere (Wang & Isola 2020,
"Understanding Contrastive Representation Learning through Alignment and Uniformity on the
Hypersphere", https://arxiv.org/abs/2005.10242, eqs. 4-5), in MoCo's layout: the alignment of
each query with its own key, the uniformity of the queries against the queue and the strategy's
negatives (shared by every query, and each query's own).

    L = mean_i ||q_i - k_i||^alpha + weight * log mean_{i,n} exp(-t ||q_i - n||^2)

    loss:
      name: align_uniform
      kwargs: {t: 2.0, weight: 1.0}
"""

from __future__ import annotations

import torch

from pretrain.losses import Loss, Step


class AlignUniform(Loss):
    """Alignment + uniformity (Wang & Isola 2020, eqs. 4-5) of the queries against their keys
    and the queue (found through the entry point ``negmine.losses``: ``align_uniform``).

    Args:
        t: the uniformity kernel's scale, positive (paper: 2).
        alpha: the alignment's exponent, positive (paper: 2).
        weight: the uniformity term's weight (paper: 1).
    """

    syncs_per_step = 0  # device ops only
    batch_layout = False  # MoCo's layout (queries against keys), no symmetric form

    def __init__(self, *, t: float = 2.0, alpha: float = 2.0, weight: float = 1.0) -> None:
        super().__init__()  # no temperature: the trainer passes a loss only what it takes
        if not t > 0 or not alpha > 0:
            raise ValueError(f"t and alpha must be positive, got t={t}, alpha={alpha}")
        self.t, self.alpha, self.weight = t, alpha, weight

    def forward(self, s: Step) -> torch.Tensor:
        q = s.emb.q
        align = (q - s.emb.k.to(q.dtype)).norm(dim=1).pow(self.alpha).mean()
        # the strategy's negatives are consumed: extra.shared beside the queue for every query,
        # extra.per_query (N, S, D) beside it for its own query (the contract kit checks both)
        negatives = s.queue if s.extra.shared is None else torch.cat([s.queue, s.extra.shared])
        sq = torch.cdist(q, negatives.detach().to(q.dtype)).pow(2)  # (N, K + M)
        if s.extra.per_query is not None:
            own = (q.unsqueeze(1) - s.extra.per_query.detach().to(q.dtype)).pow(2).sum(-1)
            sq = torch.cat([sq, own], dim=1)  # (N, K + M + S)
        uniform = (-self.t * sq).exp().mean().log()
        return align + self.weight * uniform
