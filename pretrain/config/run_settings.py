"""The run settings a loss may take besides its own ``loss.kwargs``: a loss declares their names
in ``Loss.from_run`` (its constructor's keyword arguments of those names), and they are read from
the config here, in one place; no loss names a config key.

    kwargs = run_settings.values(cfg, taken(SupCon), num_classes)  # {"temperature": 0.2, ...}

A run setting goes only to a loss whose constructor takes it (:func:`taken`): a loss without a
temperature (alignment and uniformity, say) has no ``temperature`` argument and is built without.
"""

from __future__ import annotations

import inspect
from typing import Any

#: The key a run setting is read from; ``num_classes`` is the training set's class count.
NUM_CLASSES = "the training set's class count"
KEYS: dict[str, str] = {
    "temperature": "moco.temperature",
    "num_classes": NUM_CLASSES,
    "dim": "model.dim",
    "classes": "data.in_classes",
    "epochs": "train.epochs",
    "bn_splits": "model.bn_splits",
    "contrast_queue": "loss.contrast_queue",
}


def values(cfg: Any, names: tuple[str, ...], num_classes: int) -> dict[str, Any]:
    """The run settings ``names`` of the resolved config ``cfg`` (a list for a sequence)."""
    unknown = [n for n in names if n not in KEYS]
    if unknown:
        raise ValueError(
            f"unknown run setting(s) {', '.join(unknown)} in from_run; known: {', '.join(KEYS)}"
        )
    out: dict[str, Any] = {}
    for name in names:
        if KEYS[name] == NUM_CLASSES:
            out[name] = num_classes
            continue
        section, key = KEYS[name].split(".")
        value = getattr(getattr(cfg, section), key)
        out[name] = list(value) if isinstance(value, (list, tuple)) else value
    return out


def taken(cls: Any) -> tuple[str, ...]:
    """The run settings of ``cls.from_run`` that its constructor takes (all of them where it
    takes ``**kwargs``), in that order: the base's ``from_run`` names ``temperature``, which a
    loss that uses none leaves out of its signature."""
    names = tuple(getattr(cls, "from_run", ()))
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return names
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return names
    return tuple(n for n in names if n in params)


def source(name: str) -> str:
    """Where the trainer takes run setting ``name`` from, as the messages say it."""
    return f"({KEYS[name]})" if KEYS[name] == NUM_CLASSES else KEYS[name]
