"""Registry of negative strategies keyed by their YAML name (``negatives.name``).

    strategy = negatives.create("none")
    negatives.list_strategies()  # ['none', ...]

Registration is explicit: each strategy module is imported by hand at the bottom of this file, and
its class carries ``@register("name")``; a duplicate name is an error.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from negatives.base import ExtraNegatives, NegativeStrategy

_REGISTRY: dict[str, type[NegativeStrategy]] = {}


def register(name: str) -> Callable[[type[NegativeStrategy]], type[NegativeStrategy]]:
    """Class decorator adding a strategy under ``name``."""

    def add(cls: type[NegativeStrategy]) -> type[NegativeStrategy]:
        if name in _REGISTRY:
            raise ValueError(f"negative strategy {name!r} is already registered")
        _REGISTRY[name] = cls
        return cls

    return add


def list_strategies() -> list[str]:
    return sorted(_REGISTRY)


def create(name: str, **kwargs: Any) -> NegativeStrategy:
    """Build strategy ``name``; kwargs that are None are dropped so class defaults apply."""
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=1)
        raise ValueError(
            f"unknown negative strategy {name!r}"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; available: {', '.join(list_strategies())}"
        )
    try:
        return _REGISTRY[name](**{k: v for k, v in kwargs.items() if v is not None})
    except TypeError as e:
        raise ValueError(f"bad arguments for negative strategy {name!r}: {e}") from e


from negatives import mioc, mochi, none, outliers  # noqa: E402,F401  (explicit registration)

__all__ = ["ExtraNegatives", "NegativeStrategy", "create", "list_strategies", "register"]
