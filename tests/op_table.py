"""The documented aten ops per steady-state training step (``tests/count_ops.py``, counted by
:mod:`op_counter` on a CPU), per recipe x negative strategy, on the device path (split BN's
Triton kernels, as on CUDA); ``tests/test_step_ops.py`` asserts them and that
docs/step_counts.md shows them.

A new strategy has no entry, so the test fails until its count is written here. MiOC is counted
on its CUDA path (the OC-SVM's Gram matrix, fit and scoring as three Triton launches, run by
Triton's interpreter on a CPU); its count does not depend on the solver's iterations, so every
count is exact.
"""

from __future__ import annotations

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
BEFORE = {"cifar10_moco": 1802, "digits_moco": 426}  # plain MoCo at fb6efcd (per-split BN on
# every device, SGD looping over parameters): the same counter and harness
TARGETS = {"cifar10_moco": 700, "digits_moco": 350}  # plain MoCo, eager
STRATEGY_TARGET = 0.15  # what any strategy may add to its recipe's plain MoCo step
