"""``none``: plain MoCo, no extra negatives."""

from __future__ import annotations

from negatives.base import NegativeStrategy, strategies


@strategies.register("none")
class NoNegatives(NegativeStrategy):
    """The queue alone (MoCo v2). No arguments."""

    capturable = True
    # compared captured with eager on a GPU: cifar10_moco (with loss infonce) on an H200,
    # 2026-11-28 at d66eca4 and bf56f2b, the GPU suite's graphs part (benchmarks/RESULTS.md)
    capture_verified = True
    zero_kwargs = {}
