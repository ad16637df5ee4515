"""The pinned aten ops per steady-state training step of the built-ins: the pins live in the
package (:mod:`pretrain.testing.pins`, which ``scripts/gen_step_counts.py`` writes to
docs/step_counts.md), counted by ``tests/helpers/count_ops.py``;
``tests/pretrain/engine/test_step_ops.py`` asserts them exactly (regression pins) and holds a class
without a pin to the contract kit's relative bound (:func:`pretrain.testing.ops.check_bound`: its
``ops_budget``, else +15 %).
"""

from __future__ import annotations

from pretrain.testing import ops
from pretrain.testing.pins import (
    BEFORE,
    DEVICE_OPS,
    LOSS_OPS,
    PATH_OPS,
    STRATEGY_TARGET,
    TARGETS,
)

check_bound = ops.check_bound  # the contract kit's bound: the class's ops_budget, else +15 %

__all__ = ["BEFORE", "DEVICE_OPS", "LOSS_OPS", "PATH_OPS", "STRATEGY_TARGET", "TARGETS",
           "check_bound"]  # fmt: skip
