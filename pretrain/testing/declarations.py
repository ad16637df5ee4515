"""The declaration check: the contract's class attributes have their types, and the contract's
settings are accepted by the constructor (fast, before anything runs)."""

from __future__ import annotations

import inspect
from typing import Any

from pretrain.engine.failures import fail, kind_of

#: attribute -> (the types it may have, what it holds) of both kinds.
COMMON: dict[str, tuple[tuple[type, ...], str]] = {
    "syncs_why": ((str,), "a sentence"),
    "why_not_capturable": ((str,), "a sentence"),
    "step_state": ((str,), "a sentence, or empty"),
    "capturable": ((bool,), "True or False"),
    "contract_kwargs": ((dict,), "a dict of constructor keyword arguments"),
    "ops_budget": ((float, int, type(None)), "None (the default +15 %) or a fraction such as 1.2"),
}
STRATEGY = {
    "zero_kwargs": ((dict, type(None)), "None or a dict of constructor keyword arguments"),
    "symmetric_ok": ((bool,), "True or False"),
    "needs_global_batch": ((bool,), "True or False"),
    "replaces_queue": ((bool,), "True or False"),
    "ddp_check": ((bool,), "True or False"),
}
LOSS = {
    "accepts_strategies": ((tuple, type(None)), "None (any) or a tuple of strategy names"),
    "why_strategies": ((str,), "a sentence"),
    "batch_layout": ((bool,), "True or False"),
    "can_drop_queue": ((bool,), "True or False"),
    "needs_labels": ((bool,), "True or False"),
    "extra_views": ((int,), "a whole number >= 0"),
    "from_run": ((tuple,), "a tuple of run settings (temperature, num_classes, dim, ...)"),
}


def accepted(cls: type, kwargs: dict[str, Any], given: tuple[str, ...] = ()) -> str:
    """Why ``cls(**kwargs)`` is refused by its signature (an unknown argument, or a required one
    missing other than ``given``), or ''."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return ""
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return ""
    for key in kwargs:
        if key not in params:
            return f"the constructor has no argument {key!r} (it takes {', '.join(params)})"
    for name, p in params.items():
        required = p.default is inspect.Parameter.empty and p.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )
        if required and name not in kwargs and name not in given:
            return f"the constructor's argument {name!r} has no default and is not given"
    return ""


def check_declarations(cls: type) -> None:
    """ContractError naming the attribute when one of ``cls``'s declarations has the wrong type
    or a setting its constructor refuses."""
    kind = kind_of(cls)
    table = {**COMMON, **(STRATEGY if kind == "strategy" else LOSS)}
    n = cls.syncs_per_step
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise fail(cls, "syncs_per_step", f"is {n!r}", "declare a whole number >= 0")
    if n and not cls.syncs_why:
        raise fail(cls, "syncs_why", f"is empty while syncs_per_step = {n}", "say where they are")
    for attribute, (types, holds) in table.items():
        value = getattr(cls, attribute)
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            raise fail(cls, attribute, f"is {value!r}", f"declare {holds}")
    budget = cls.ops_budget
    if budget is not None and budget < 0:
        raise fail(cls, "ops_budget", f"is {budget!r}", "declare a fraction >= 0 (or None)")
    if kind == "loss":
        check_run_settings(cls)
    given = tuple(getattr(cls, "from_run", ()))  # a loss's temperature comes from the run
    settings = ["contract_kwargs"] + (["zero_kwargs"] if kind == "strategy" else [])
    for attribute in settings:
        why = accepted(cls, getattr(cls, attribute) or {}, given)
        if why:
            raise fail(cls, attribute, why, "name the constructor's keyword arguments")


def check_run_settings(cls: type) -> None:
    """ContractError unless every name of a loss's ``from_run`` is a run setting the trainer
    fills in (``pretrain.config.run_settings.KEYS``)."""
    from pretrain.config import run_settings

    unknown = [n for n in cls.from_run if n not in run_settings.KEYS]
    if unknown:
        raise fail(
            cls,
            "from_run",
            f"names {', '.join(unknown)}, which the trainer does not fill in",
            f"name run settings among {', '.join(run_settings.KEYS)}",
        )
