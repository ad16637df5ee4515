"""How the contract kit names what failed: :class:`ContractError`, whose message names the class,
the attribute or hook, and what to change."""

from __future__ import annotations

from typing import Any


class ContractError(AssertionError):
    """A strategy or loss does not meet negmine's contract (an AssertionError, so pytest shows it
    as a failed assertion): the message names the class, the attribute or hook, and the fix."""


def kind_of(cls: type) -> str:
    """``"strategy"`` for a :class:`~negatives.base.NegativeStrategy`, else ``"loss"``."""
    from negatives.base import NegativeStrategy

    return "strategy" if issubclass(cls, NegativeStrategy) else "loss"


def registry_of(cls: type) -> Any:
    """The registry that holds classes of ``cls``'s kind (strategies or losses)."""
    from negatives.base import NegativeStrategy

    if issubclass(cls, NegativeStrategy):
        import negatives

        return negatives.strategies
    from pretrain import losses

    return losses.registry


def label(cls: type) -> str:
    """The YAML name of ``cls`` where a registry holds it (installed plugins included), else its
    class name."""
    try:
        registry = registry_of(cls)
        names = registry.names()  # loads the installed plugins' entry points once
    except Exception:  # noqa: BLE001  (not a strategy or loss: its class name)
        names, registry = [], None
    for name in names:
        if registry._classes.get(name) is cls:  # noqa: SLF001
            return name
    name = vars(cls).get("name")
    return name if isinstance(name, str) else cls.__name__


def at(cls: type, member: str) -> str:
    """``strategy 'mine' (package.module.Mine.member)``: where a failure is."""
    return f"{kind_of(cls)} {label(cls)!r} ({cls.__module__}.{cls.__qualname__}.{member})"


def fail(cls: type, member: str, what: str, fix: str) -> ContractError:
    """The error for ``cls``'s ``member`` (an attribute, or a hook as ``negatives()``)."""
    return ContractError(f"{at(cls, member)}: {what}: {fix}")


def shape(t: Any) -> str:
    """``(8, 4, 17)``: a tensor's shape as the messages write it."""
    return "(" + ", ".join(str(n) for n in t.shape) + ")"
