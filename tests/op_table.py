"""The documented aten ops per steady-state training step (``tests/count_ops.py``, counted by
:mod:`op_counter` on a CPU), per recipe x negative strategy, on the device path (split BN fused,
as on CUDA); ``tests/test_step_ops.py`` asserts them and that docs/step_counts.md shows them.

A new strategy has no entry, so the test fails until its count is written here. MiOC's count
depends on its OC-SVM solver's iterations (a data-dependent number of chunks on its device loop):
the test allows it ``MIOC_SLACK`` either way; every other count is exact.
"""

from __future__ import annotations

DEVICE_OPS: dict[str, dict[str, int]] = {
    "cifar10_moco": {
        "none": 1218,
        "mochi": 1278,
        "modified_mochi": 1280,
        "outliers": 1259,
        "adco": 1307,
        "mioc": 5186,
    },
    "digits_moco": {
        "none": 270,
        "mochi": 330,
        "modified_mochi": 332,
        "outliers": 311,
        "adco": 359,
        "mioc": 4238,
    },
}
CPU_OPS = {"cifar10_moco": (1558, 480), "digits_moco": (270, 36)}  # (ops, of them batch_norm)
BEFORE = {"cifar10_moco": 1802, "digits_moco": 426}  # plain MoCo at fb6efcd (per-split BN on
# every device, SGD looping over parameters): the same counter and harness
TARGETS = {"cifar10_moco": 700, "digits_moco": 350}  # eager; documented where not reached
MIOC_SLACK = 0.10
