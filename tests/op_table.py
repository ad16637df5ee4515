"""The pinned aten ops per steady-state training step of the built-ins (``tests/count_ops.py``,
counted by :mod:`op_counter` on a CPU), per recipe x negative strategy, on the device path (split
BN's Triton kernels, as on CUDA), and per loss (with strategy none, on ``digits_moco``);
``tests/test_step_ops.py`` asserts them exactly (regression pins) and that docs/step_counts.md
shows them.

A strategy or loss without a pin (one's own, in the tree or a plugin) is counted too and held to
the relative bound of the contract kit (``negatives.testing.ops.check_bound``): at most its
``ops_budget`` over plain MoCo's step, ``STRATEGY_TARGET`` (+15 %) where it declares none. MiOC is
counted on its CUDA path (the OC-SVM's Gram matrix, fit and scoring as three Triton launches, run by
Triton's interpreter on a CPU); its count does not depend on the solver's iterations, so every
count is exact.
"""

from __future__ import annotations

from negatives.testing import ops

DEVICE_OPS: dict[str, dict[str, int]] = {
    "cifar10_moco": {
        "none": 618,
        "mochi": 650,
        "modified_mochi": 655,
        "outliers": 630,
        "adco": 649,  # 650 before queue_positives built the own-key mask by comparison
        "mioc": 645,
    },
    "digits_moco": {
        "none": 271,
        "mochi": 303,
        "modified_mochi": 308,
        "outliers": 283,
        "adco": 302,  # 303 before (as cifar10_moco's: zeros + arange + index_put_ -> arange + eq)
        "mioc": 298,
    },
}
PATH_OPS = {  # plain MoCo with split BN on each path: (ops, of them batch_norm)
    "triton": {"cifar10_moco": (618, 0), "digits_moco": (271, 36)},  # = DEVICE_OPS' none
    "fused": {"cifar10_moco": (1238, 0), "digits_moco": (271, 36)},
    "per_split": {"cifar10_moco": (1558, 480), "digits_moco": (271, 36)},
}
BEFORE = {"cifar10_moco": 1802, "digits_moco": 426}  # plain MoCo before the step was
# fused (per-split BN on every device, SGD looping over parameters): the same counter and harness
TARGETS = {"cifar10_moco": 700, "digits_moco": 350}  # plain MoCo, eager
STRATEGY_TARGET = ops.DEFAULT_BUDGET  # what an unpinned class may add (without an ops_budget)
LOSS_OPS = {  # digits_moco, strategy none, each loss's contract (fnc: data.support_views=2)
    "cider": 565,
    "debiased": 317,
    "decoupled": 276,
    "firm": 291,
    "fnc": 419,
    "hard": 329,
    "imix": 301,
    "infonce": 271,  # = DEVICE_OPS' none
    "nt_xent": 279,
    "ring": 281,
    "sincere": 325,
    "supcon": 291,
}


check_bound = ops.check_bound  # the contract kit's bound: the class's ops_budget, else +15 %
