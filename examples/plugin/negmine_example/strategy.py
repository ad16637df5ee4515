"""``negatives.name: batch_mix``: mixes of two keys of the batch as extra shared negatives.

A toy in the spirit of MoCHi (Kalantidis et al. 2020, "Hard Negative Mixing for Contrastive
Learning", https://arxiv.org/abs/2010.01028, eq. 2), but mixing batch keys rather than the hardest
queue keys: ``h = normalize(a * k_i + (1 - a) * k_j)`` with i, j drawn uniformly from the batch and
a ~ U(0, 1). Not a method; it shows what a strategy declares.

    negatives:
      name: batch_mix
      kwargs: {num_mix: 16}
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from negatives import ExtraNegatives, NegativeStrategy, Step


class BatchMix(NegativeStrategy):
    """Mixes of two batch keys, shared by every query (found through the entry point
    ``negmine.strategies``: ``batch_mix``).

    Args:
        num_mix: synthetic negatives per step, >= 0 (0: plain MoCo).
    """

    # The contract (negatives.base.NegativeStrategy): what the test suite measures.
    syncs_per_step = 0  # no host reads: draws and mixing are device ops of fixed shape
    contract_kwargs = {"num_mix": 4}  # the contract tests' sizes
    zero_kwargs = {"num_mix": 0}  # no synthetic points: plain MoCo's logits

    def __init__(self, num_mix: int = 16) -> None:
        super().__init__()
        if num_mix < 0:
            raise ValueError(f"num_mix must be >= 0, got {num_mix}")
        self.num_mix = num_mix

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        if self.num_mix == 0:
            return ExtraNegatives()
        k = s.emb.k.detach().float()
        i, j = (torch.randint(k.shape[0], (self.num_mix,), device=k.device) for _ in range(2))
        a = torch.rand(self.num_mix, 1, device=k.device)
        mixed = F.normalize(a * k[i] + (1 - a) * k[j], dim=1)
        return ExtraNegatives(shared=mixed.to(s.emb.k.dtype))
