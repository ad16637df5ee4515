"""negmine's contract kit, installed with the package: what a strategy or loss of one's own must
meet, checked in its own tests exactly as negmine's suite checks the built-ins.

    from pretrain.testing import check_loss, check_strategy

    def test_my_strategy_meets_the_contract():
        check_strategy(MyStrategy)      # ContractError naming the class, attribute or hook

    def test_my_loss_meets_the_contract():
        check_loss(MyLoss)

Each runs, in well under a minute on a CPU: the declaration check; the record
(:class:`~negatives.base.ExtraNegatives`: shapes, dtype, device, finiteness, unit norm,
detachment) at each of 35 calls of the hook (``s.ctx.global_step`` 0 to 31 and three far steps:
:data:`.behaviour.CALLS`) or the loss's scalar and gradient; determinism under a fixed seed; no
gradient into the queue; ``zero_kwargs`` giving plain MoCo's logits; a loss's use of the extra
negatives; the CUDA-graph refusal; host syncs per step against ``syncs_per_step`` in real training
steps and the same count at each of the 35 calls of the hooks; aten ops per step against
``ops_budget`` (+15 % by default) at batches 16 and 32, their growth held at batch 512; a 2-rank
gloo equivalence for a strategy that sets ``ddp_check = True``. The pytest plugin (entry point
``pytest11``: ``negmine``) prints what was measured at the end of the session.

Modules: :mod:`.declarations`, :mod:`.behaviour`, :mod:`.syncs`, :mod:`.ops`, :mod:`.cuda_graph`,
:mod:`.ddp`, :mod:`.steps` (the real steps), the counters :mod:`.sync_counter` and
:mod:`.op_counter`; negmine's own pins of its built-ins (:mod:`.pins`) and its fake-data recipe
(:mod:`.fakedata`). The checks of a record and the failures' form are the trainer's own
(:mod:`pretrain.engine.records`, :mod:`pretrain.engine.failures`): the kit sits above the trainer
whose steps it runs, in ``pretrain``, and the trainer checks its first step with the same code.
"""

from __future__ import annotations

from pretrain.engine.failures import ContractError
from pretrain.testing.op_counter import OpCounter
from pretrain.testing.sync_counter import SyncCounter


def check_strategy(cls: type, *, counts: bool = True) -> object:
    """:func:`pretrain.testing.kit.check_strategy` (imported on first use: the kit loads the
    trainer)."""
    from pretrain.testing.kit import check_strategy as check

    return check(cls, counts=counts)


def check_loss(cls: type, *, counts: bool = True) -> object:
    """:func:`pretrain.testing.kit.check_loss` (imported on first use)."""
    from pretrain.testing.kit import check_loss as check

    return check(cls, counts=counts)


__all__ = ["ContractError", "OpCounter", "SyncCounter", "check_loss", "check_strategy"]
