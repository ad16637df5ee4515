"""``none``: plain MoCo, no extra negatives."""

from __future__ import annotations

from negatives import register
from negatives.base import NegativeStrategy


@register("none")
class NoNegatives(NegativeStrategy):
    """The queue alone (MoCo v2). No arguments."""
