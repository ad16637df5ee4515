"""Negative strategies keyed by their YAML name (``negatives.name``).

    strategy = negatives.create("none")
    negatives.list_strategies()  # ['mioc', 'mochi', ...]

Registration is explicit: each strategy module registers its class with
``@strategies.register("name")`` (``negatives.base.strategies``, an instance of the leaf package's
``negmine_core.registry.Registry``) and is imported once below. Adding a strategy is one file
plus one name in that import line.
"""

from __future__ import annotations

from typing import Any

from negatives import adco, mioc, mochi, none, outliers  # noqa: F401  (registers the strategies)
from negatives.base import NegativeStrategy, strategies
from negmine_core.registry import Registry
from negmine_core.step import ExtraNegatives, Step

register = strategies.register


def list_strategies() -> list[str]:
    return strategies.names()


def create(name: str, **kwargs: Any) -> NegativeStrategy:
    """Build strategy ``name``; kwargs that are None are dropped so class defaults apply, and an
    unknown kwarg is a ValueError with a suggestion and the valid list."""
    return strategies.create(name, **kwargs)


__all__ = [
    "ExtraNegatives",
    "NegativeStrategy",
    "Registry",
    "Step",
    "create",
    "list_strategies",
    "register",
    "strategies",
]
