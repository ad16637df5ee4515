"""negmine's contract kit, installed with the package: what a strategy or loss of one's own must
meet, checked in its own tests exactly as negmine's suite checks the built-ins, one pytest test
per check (as scikit-learn's ``parametrize_with_checks``), so every failing check shows at once:

    from pretrain.testing import parametrize_with_checks

    @parametrize_with_checks([MyStrategy, MyLoss])
    def test_contract(cls, check):
        check(cls)          # ContractError naming the class, attribute or hook

``check_strategy(MyStrategy)`` / ``check_loss(MyLoss)`` run the same checks in order and stop at
the first failure. The checks ([`kit.checks`][pretrain.testing.kit.checks]), in well under a
minute on a CPU: the declarations (``check_declarations``); the record
([`ExtraNegatives`][negmine_core.step.ExtraNegatives]: shapes, dtype, device, finiteness, unit
norm, detachment) at each of 35 calls of the hook (``s.ctx.global_step`` 0 to 31 and three far
steps: `behaviour.CALLS`; ``check_records``) or the loss's scalar and gradient
(``check_loss_value``, ``check_gradients``); determinism under a fixed seed; no gradient into the
queue; ``transform_batch`` keeping the batch's form; ``zero_kwargs`` giving plain MoCo's logits; a
loss's use of the extra negatives; the CUDA-graph refusal; host syncs per step against
``syncs_per_step`` in real training steps and the same count at each of the 35 calls of the hooks
(``check_syncs``); aten ops per step against ``ops_budget`` (+15 % by default) at batches 16 and
32, their growth held at batch 512 (``check_ops``); a 2-rank gloo equivalence for a strategy that
sets ``ddp_check = True`` (``check_ranks``). The pytest plugin (entry point ``pytest11``:
``negmine``) prints what was measured at the end of the session.

Modules: [`kit`][pretrain.testing.kit] (the named checks), `declarations`, `behaviour`,
`syncs`, `ops`, `cuda_graph`, `ddp`, `steps` (the real steps); negmine's own pins of its
built-ins (`pins`) and its fake-data recipe (`fakedata`). The contract itself (declarations, the
checks of a record, the failures' form, the counters ``SyncCounter`` and ``OpCounter``) lives in
[`negmine_core.contract`][negmine_core.contract], which the trainer imports too: the kit sits
above the trainer whose steps it runs, in ``pretrain``, and the trainer checks every step with
the same code.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from negmine_core.contract.messages import ContractError
from negmine_core.contract.op_counter import OpCounter
from negmine_core.contract.sync_counter import SyncCounter


def check_strategy(cls: type, *, counts: bool = True) -> object:
    """[`kit.check_strategy`][pretrain.testing.kit.check_strategy] (imported on first use: the
    kit loads the trainer)."""
    from pretrain.testing.kit import check_strategy as check

    return check(cls, counts=counts)


def check_loss(cls: type, *, counts: bool = True) -> object:
    """[`kit.check_loss`][pretrain.testing.kit.check_loss] (imported on first use)."""
    from pretrain.testing.kit import check_loss as check

    return check(cls, counts=counts)


def parametrize_with_checks(classes: Iterable[type], *, counts: bool = True) -> Any:
    """[`kit.parametrize_with_checks`][pretrain.testing.kit.parametrize_with_checks] (imported
    on first use)."""
    from pretrain.testing.kit import parametrize_with_checks as parametrize

    return parametrize(classes, counts=counts)


__all__ = [
    "ContractError",
    "OpCounter",
    "SyncCounter",
    "check_loss",
    "check_strategy",
    "parametrize_with_checks",
]
