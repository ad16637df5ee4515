"""How the contract names what failed, for the kit and the trainer alike: :class:`ContractError`,
whose message names the class, the attribute or hook, and what to change."""

from __future__ import annotations

from typing import Any


class ContractError(AssertionError):
    """A strategy or loss does not meet negmine's contract (an AssertionError, so pytest shows it
    as a failed assertion): the message names the class, the attribute or hook, and the fix."""


def kind_of(cls: type) -> str:
    """``"strategy"`` for a strategy class (``kind = "strategy"``, set by
    ``negatives.NegativeStrategy``), else ``"loss"``."""
    return "strategy" if getattr(cls, "kind", "") == "strategy" else "loss"


def registry_of(cls: type) -> Any:
    """The registry that holds classes of ``cls``'s kind (its base class's ``registry``), or
    None."""
    return getattr(cls, "registry", None)


def label(cls: type) -> str:
    """The YAML name of ``cls`` where a registry holds it (installed plugins included), else its
    class name."""
    registry = registry_of(cls)
    try:
        name = registry.name_of(cls) if registry is not None else None
    except Exception:  # noqa: BLE001  (a registry that cannot load its plugins: the class name)
        name = None
    if name is not None:
        return name
    own = vars(cls).get("name")
    return own if isinstance(own, str) else cls.__name__


def at(cls: type, member: str) -> str:
    """``strategy 'mine' (package.module.Mine.member)``: where a failure is."""
    return f"{kind_of(cls)} {label(cls)!r} ({cls.__module__}.{cls.__qualname__}.{member})"


def fail(cls: type, member: str, what: str, fix: str) -> ContractError:
    """The error for ``cls``'s ``member`` (an attribute, or a hook as ``negatives()``)."""
    return ContractError(f"{at(cls, member)}: {what}: {fix}")


def shape(t: Any) -> str:
    """``(8, 4, 17)``: a tensor's shape as the messages write it."""
    return "(" + ", ".join(str(n) for n in t.shape) + ")"
