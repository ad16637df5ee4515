"""The number of would-be CUDA host syncs per steady-state training step, as measured by
:mod:`sync_counter` on a CPU (``tests/pretrain/engine/test_step_syncs.py`` asserts it;
docs/step_counts.md shows it, written by ``scripts/gen_step_counts.py``). A pair's count is what its
loss and its strategy declare (their ``syncs_per_step`` class attributes, the contract of
``negatives.base.NegativeStrategy`` and ``pretrain.losses.Loss``) plus the kappa head's and split
BN's Triton path's (0 each: :mod:`pretrain.testing.pins`). Every step counts it, the first one
included.

A strategy or loss of one's own declares its count on its class (default 0); the sync test
measures it like a built-in's and names the class and the attribute when they differ, with the
contract kit's check (``pretrain.testing.syncs``), which a plugin's own tests run too.
"""

from __future__ import annotations

from pretrain.testing import syncs
from pretrain.testing.pins import KAPPA_SYNCS, MIOC_CPU_PATH, SPLIT_BN_SYNCS

__all__ = ["KAPPA_SYNCS", "MIOC_CPU_PATH", "SPLIT_BN_SYNCS", "check", "declared", "who"]


def declared(loss: str, strategy: str, kappa: bool = False, split_bn: bool = False) -> int:
    """The count ``loss`` x ``strategy`` declare (their ``syncs_per_step``), + the model's."""
    extra = (KAPPA_SYNCS[0] if kappa else 0) + (SPLIT_BN_SYNCS[0] if split_bn else 0)
    return syncs.declared(loss, strategy, extra)


who = syncs.who  # where each side's count is declared, for a failure message


def check(pair: str, got: dict) -> None:
    """The contract kit's check (``pretrain.testing.syncs.check_pair``: a ContractError, an
    AssertionError, naming the classes and ``syncs_per_step``) of a pair's measured count
    (``got``: a result of tests/helpers/count_steps.py) against what it declares."""
    loss, strategy = pair.split("/")
    kappa, split_bn = loss.endswith("+kappa"), loss.endswith("+split_bn")
    loss = loss.removesuffix("+kappa").removesuffix("+split_bn")
    syncs.check_pair(pair, got, declared(loss, strategy, kappa, split_bn), who(loss, strategy))
