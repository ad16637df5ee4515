"""``none``: plain MoCo, no extra negatives."""

from __future__ import annotations

from negatives.base import NegativeStrategy, strategies


@strategies.register("none")
class NoNegatives(NegativeStrategy):
    """The queue alone (MoCo v2). No arguments."""

    capturable = True
    zero_kwargs = {}
