"""Strategies that keep the negatives contract for the first steps and break it later: the
trainer's per-step checks (tests/pretrain/engine/test_first_step.py) and the contract kit's calls
at several steps (tests/pretrain/testing/test_contract_kit.py) must both catch them."""

from __future__ import annotations

import torch

from negatives import ExtraNegatives, NegativeStrategy, Step


class GradAfterEight(NegativeStrategy):
    """``s.emb.k`` for 8 steps (unit norm, detached), then twice as long and carrying a gradient
    (a parameter's)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.full((), 2.0))

    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives(
            shared=s.emb.k.detach() if s.ctx.global_step < 8 else s.emb.k * self.scale
        )


class NaNEveryFifth(NegativeStrategy):
    """``s.emb.k``, but NaN on every 5th call from the 8th on (calls 10, 15, ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        self.calls += 1
        bad = self.calls >= 8 and self.calls % 5 == 0
        return ExtraNegatives(shared=s.emb.k * float("nan") if bad else s.emb.k)
