"""A config value checked against its field's type: ints widen to floats, YAML's ``1e-4`` string
reads as a float, lists become tuples where the field is one; anything else is a
:class:`~pretrain.errors.ConfigError` naming the key, the source and the expected type."""

from __future__ import annotations

import collections.abc
import dataclasses
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pretrain.errors import ConfigError


def coerce(
    value: Any, hint: Any, key: str, source: str, choices: Mapping[str, Sequence[str]] = {}
) -> Any:
    """Check ``value`` against a field's type; ints widen to floats, lists become tuples."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)

    def fail() -> ConfigError:
        return ConfigError(
            f"config key {key!r} in {source} expects {_type_name(hint)}, "
            f"got {value!r} ({type(value).__name__})"
        )

    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return coerce(value, inner[0], key, source, choices)
    if hint is bool:
        if not isinstance(value, bool):
            raise fail()
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail()
        return value
    if hint is float:
        # YAML 1.1 reads "1e-4" (no dot) as a string; accept numeric strings for float keys.
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise fail() from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail()
        if not math.isfinite(value):  # YAML reads .inf/.nan (and inf/nan from strings above)
            raise ConfigError(
                f"config key {key!r} in {source} must be a finite number, got {value!r}"
            )
        return float(value)
    if hint is str:
        if isinstance(value, bool):
            # YAML 1.1 reads unquoted off/on/no/yes as booleans: `train.amp=off` or `amp: off`
            # means the choice "off" where the key has one.
            word = "on" if value else "off"
            if word in choices.get(key, ()):
                return word
            raise ConfigError(
                f"{fail()}; YAML reads unquoted off/on/no/yes/true/false as booleans: quote the "
                f"value (on the command line: {key}='\"...\"')"
            )
        if not isinstance(value, str):
            raise fail()
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise fail()
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise fail()
            return tuple(coerce(v, a, key, source, choices) for v, a in zip(value, args))
        return [coerce(v, args[0], key, source, choices) for v in value]
    if origin is dict:
        if not isinstance(value, dict):
            raise fail()
        return dict(value)
    if hint is Any:
        return value
    raise TypeError(f"unsupported field type {hint} for {key}")


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def typed_kwargs(cfg: Any) -> Any:
    """``negatives.kwargs`` and ``loss.kwargs`` coerced by their constructor's annotations, as the
    typed keys are (YAML reads ``1e-3`` as a string: ``gamma: 1e-3`` becomes 0.001); a value that
    does not fit is a :class:`ConfigError`. Unknown names and keys are left to :func:`validate`."""
    from pretrain.config.rules import registries

    changes = {}
    for name_key, registry in registries().items():
        section = name_key.split(".")[0]
        sub = getattr(cfg, section)
        if sub.name not in registry or registry.problem(sub.name) or not sub.kwargs:
            continue  # validate() names the problem
        hints = registry.annotations(sub.name)
        typed = {}
        for key, value in sub.kwargs.items():
            hint = _plain_hint(hints.get(key, Any))
            try:
                typed[key] = (
                    value
                    if value is None
                    else coerce(value, hint, f"{section}.kwargs.{key}", "the config")
                )
            except TypeError:  # a type the config schema does not know: passed as given
                typed[key] = value
        changes[section] = dataclasses.replace(sub, kwargs=typed)
    return dataclasses.replace(cfg, **changes) if changes else cfg


def _plain_hint(hint: Any) -> Any:
    """``Sequence[x]`` (collections.abc) as ``list[x]``, inside unions too, for :func:`coerce`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_plain_hint(a) for a in args)]  # noqa: UP007
    if origin is collections.abc.Sequence:
        return list[args[0]] if args else list
    return hint
