"""The language of the config's value rules (:mod:`pretrain.config.rules` holds the rules): a
:class:`Cond` is a value computed from the config and the registries' name lists, built from
:func:`key` (a config value), :func:`names` (a registry list) and Python's operators (``&`` and,
``|`` or, ``~`` not, comparisons, :meth:`Cond.isin`), evaluated without ``eval`` and written out
for the configuration page by the same object; a :class:`Rule` names the key it reports, the
condition that must hold and its message; :func:`bound` states a numeric bound once.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Facts:
    """What rules read besides the config: the chosen loss and strategy classes, and the names
    of the registered losses and strategies that have each rule flag (for the messages)."""

    loss: Any  # the loss class of loss.name
    strategy: Any  # the strategy class of negatives.name
    names: dict[str, tuple[str, ...]] = field(default_factory=dict)  # {"batch_losses": (...)}


Value = Callable[[Any, dict[str, tuple[str, ...]]], Any]  # (cfg, registry lists) -> value

AND, OR, NOT, ATOM = 1, 0, 2, 3  # how tightly a condition binds, for the parentheses it prints


class Cond:
    """A value computed from the config (and the registries' name lists), with the text that
    states it: ``str(cond)`` is how the page writes it, ``cond(cfg, names)`` its value."""

    def __init__(self, text: str, fn: Value, keys: frozenset[str], level: int = ATOM) -> None:
        self.text, self.fn, self.keys, self.level = text, fn, keys, level

    def __call__(self, cfg: Any, names: dict[str, tuple[str, ...]]) -> Any:
        return self.fn(cfg, names)

    def __str__(self) -> str:
        return self.text

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        """A condition has no truth value of its own (it is one only for a config): Python's
        ``and`` / ``or`` / ``not`` would silently keep one side, so they are refused."""
        raise TypeError(
            f"config rule condition {self}: use & (and), | (or) and ~ (not) to combine "
            "conditions; Python's and/or/not would silently drop one of them"
        )

    def _op(self, other: Any, sym: str, op: Callable[[Any, Any], Any]) -> Cond:
        o = lift(other)
        text = f"{self.text} {sym} {o.text}"
        return Cond(text, lambda c, n: op(self(c, n), o(c, n)), self.keys | o.keys)

    def __eq__(self, other: Any) -> Cond:  # type: ignore[override]
        return self._op(other, "==", lambda a, b: a == b)

    def __ne__(self, other: Any) -> Cond:  # type: ignore[override]
        return self._op(other, "!=", lambda a, b: a != b)

    def __lt__(self, other: Any) -> Cond:
        return self._op(other, "<", lambda a, b: a < b)

    def __le__(self, other: Any) -> Cond:
        return self._op(other, "<=", lambda a, b: a <= b)

    def __gt__(self, other: Any) -> Cond:
        return self._op(other, ">", lambda a, b: a > b)

    def __ge__(self, other: Any) -> Cond:
        return self._op(other, ">=", lambda a, b: a >= b)

    def __mod__(self, other: Any) -> Cond:
        return self._op(other, "%", lambda a, b: a % b)

    def __mul__(self, other: Any) -> Cond:
        return self._op(other, "*", lambda a, b: a * b)

    def __floordiv__(self, other: Any) -> Cond:
        return self._op(other, "//", lambda a, b: a // b)

    def isin(self, other: Any) -> Cond:
        return self._op(other, "in", lambda a, b: a in b)

    def not_in(self, other: Any) -> Cond:
        return self._op(other, "not in", lambda a, b: a not in b)

    def _join(self, other: Any, level: int) -> Cond:
        o = lift(other)
        parts = [c.text if c.level in (level, NOT, ATOM) else f"({c.text})" for c in (self, o)]
        if level == AND:
            return Cond(
                " and ".join(parts), lambda c, n: self(c, n) and o(c, n), self.keys | o.keys, level
            )
        return Cond(
            " or ".join(parts), lambda c, n: self(c, n) or o(c, n), self.keys | o.keys, level
        )

    def __and__(self, other: Any) -> Cond:
        return self._join(other, AND)

    def __or__(self, other: Any) -> Cond:
        return self._join(other, OR)

    def __invert__(self) -> Cond:
        inner = self.text if self.level >= NOT else f"({self.text})"
        return Cond(f"not {inner}", lambda c, n: not self(c, n), self.keys, NOT)


def lift(value: Any) -> Cond:
    """A constant (or a condition, as it is)."""
    if isinstance(value, Cond):
        return value
    return Cond(repr(value), lambda c, n: value, frozenset())


def value_of(cfg: Any, dotted: str) -> Any:
    """The value of dotted ``key`` (``seed``, ``train.epochs``) in ``cfg``."""
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def key(dotted: str) -> Cond:
    """The config's value of ``section.name`` (or of a top-level key such as ``seed``)."""
    return Cond(dotted, lambda c, n: value_of(c, dotted), frozenset({dotted}))


def names(flag: str) -> Cond:
    """The registered names with a rule flag (:func:`registry_names`), e.g. ``batch_losses``."""
    return Cond(f"{{{flag}}}", lambda c, n: n[flag], frozenset())


def check(what: str, fn: Callable[[Any], bool], dotted: str) -> Cond:
    """``fn`` of one key's value, written as ``what`` (a check no operator states)."""
    return Cond(f"{what}({dotted})", lambda c, n: fn(key(dotted)(c, n)), frozenset({dotted}))


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One check of the config.

    Args:
        key: the dotted key the error names (and whose value it shows).
        why: the message after ``config key 'KEY' = VALUE``, a template (see the module doc).
        holds: the condition that must hold (a :class:`Cond`).
    """

    key: str
    why: str
    holds: Cond

    @property
    def across(self) -> bool:
        """Whether the rule reads other keys than its own (a rule across keys)."""
        return bool(self.holds.keys - {self.key})

    def value(self, cfg: Any) -> Any:
        return value_of(cfg, self.key)

    def condition(self, names: dict[str, tuple[str, ...]]) -> str:
        """The condition as the page writes it, the registries' lists written out as tuples."""
        return str(self.holds).format(**{k: repr(v) for k, v in names.items()})

    def error(self, cfg: Any, facts: Facts) -> str | None:
        """None if the rule holds, else the full message."""
        if self.holds(cfg, facts.names):
            return None
        message = _Fill(cfg, facts.names).format(self.why)
        return f"config key {self.key!r} = {self.value(cfg)!r} {message}"


class _Fill(string.Formatter):
    """``{section.key}`` (with ``!r``) from the config, ``{name}`` from the registries' lists."""

    def __init__(self, cfg: Any, names: dict[str, tuple[str, ...]]) -> None:
        self.cfg, self.names = cfg, names

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> tuple[Any, str]:
        if field_name in self.names:
            return ", ".join(self.names[field_name]), field_name
        obj = self.cfg
        for part in field_name.split("."):
            obj = getattr(obj, part)
        return obj, field_name


def bound(
    dotted: str,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    note: str = "",
) -> Rule:
    """``dotted`` within [low, high] (an end ``None`` is unbounded, ``*_open`` excludes it): the
    condition and the message from the same two numbers."""
    v = key(dotted)
    holds = lift(True)
    if low is not None:
        holds = (v > low) if low_open else (v >= low)
    if high is not None:
        upper = (v < high) if high_open else (v <= high)
        holds = upper if low is None else holds & upper
    if low is not None and high is not None:
        why = f"must lie in {'(' if low_open else '['}{_num(low)}, {_num(high)}"
        why += ")" if high_open else "]"
    elif low == 0 and low_open:
        why = "must be positive"
    elif low is not None:
        why = f"must be {'above' if low_open else '>='} {_num(low)}"
    else:
        why = f"must be {'below' if high_open else '<='} {_num(high)}"
    return Rule(key=dotted, holds=holds, why=why + (f" ({note})" if note else ""))


def _num(x: float) -> str:
    """A bound as the message prints it: whole numbers in full (4294967295, not 4.29497e+09)."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"
