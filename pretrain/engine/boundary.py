"""The trainer's check of its first step: the strategy's record
(:class:`~negatives.base.ExtraNegatives`: shape, dtype, device, detachment) is checked before the
loss sees it, so a wrong record fails naming the strategy's class and ``negatives()``, not inside
the loss with a bare torch error; its values (finiteness, unit norm) and the loss's are computed
on the device then and read at the first log step (which reads the device anyway), so the step
itself stays free of host syncs. A loss that returns a non-finite value on finite inputs is
named, and so is a strategy whose non-finite negatives came first. Past the first step, the
trainer keeps a reference to each step's strategy inputs (:func:`remember`: no op, no read) and,
only when its finite check stops a run, runs the strategy again on them (:func:`strategy_fault`,
non-finite inputs replaced by unit vectors): a strategy that returns non-finite negatives from
finite inputs is named instead of advice on the learning rate.

The trainer calls :func:`before_loss` and :func:`after_loss` around the loss in each step (a
Python set lookup after the first) and :func:`at_log` from its finite check. The contract kit's
counts mark a run checked (:func:`mark_checked`): they measure the steady step."""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

import torch
import torch.nn.functional as F

from negatives.base import StrategyInputs
from pretrain.engine.failures import ContractError, fail
from pretrain.engine.records import HOOK, check_extra, value_fault, value_flags


class FirstStepError(RuntimeError):
    """A strategy or loss broke the contract in the run's first step (a run error, exit 1)."""


_pending: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # strategy -> device flags
_checked: weakref.WeakSet = weakref.WeakSet()  # strategies whose first step was checked
_last: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # strategy -> its last inputs


def mark_checked(run: Any) -> None:
    """Skip the first-step check for ``run`` (the contract kit's counted runs)."""
    _checked.add(run.strategy)


def first(run: Any) -> bool:
    """Whether this is ``run``'s first checked step."""
    return run.strategy not in _checked


def before_loss(run: Any, step: Any) -> None:
    """The record's form (no device read); FirstStepError naming the strategy's class."""
    if not first(run):
        return
    symmetric = bool(getattr(run.cfg.loss, "symmetric", False))
    n = step.q.shape[0] * (2 if symmetric else 1)
    try:
        check_extra(
            type(run.strategy),
            step.extra,
            step.q,
            step.queue,
            rows=n,
            because="loss.symmetric=true" if symmetric else "",
            fix_rows="declare symmetric_ok = False (its negatives are the first view's)",
            dtypes=(step.k.dtype, step.q.dtype),
            values=False,
        )
    except ContractError as e:
        raise FirstStepError(str(e)) from None
    _pending[run.strategy] = {"extra": value_flags(step.extra)}


def after_loss(run: Any, step: Any, loss: torch.Tensor) -> None:
    """The loss's value and inputs as device flags, read at the first log step."""
    if not first(run):
        return
    flags = _pending.setdefault(run.strategy, {"extra": {}})
    flags["loss"] = torch.stack(
        [torch.isfinite(loss.detach()).all(), torch.isfinite(step.q.detach()).all()]
    )
    flags["loss_class"] = type(run.loss_fn)
    _checked.add(run.strategy)


def at_log(run: Any) -> None:
    """Read the first step's flags once (a host read at a log step); FirstStepError naming the
    strategy (non-finite or non-unit negatives) or the loss (non-finite on finite inputs)."""
    flags = _pending.pop(run.strategy, None)
    if flags is None:
        return
    fault = value_fault(type(run.strategy), flags["extra"])
    if fault is not None:
        raise FirstStepError(str(fault))
    if "loss" in flags:
        loss_finite, q_finite = flags["loss"].tolist()
        if q_finite and not loss_finite:
            cls = flags["loss_class"]
            raise FirstStepError(
                f"loss {getattr(cls, 'name', cls.__name__)!r} ({cls.__module__}."
                f"{cls.__qualname__}.forward()): non-finite at the first step from finite "
                "queries and negatives: keep it finite (an eps in logs and divisions)"
            )


def remember(run: Any, seen: StrategyInputs) -> None:
    """Keep a reference to this step's strategy inputs (a dict entry: no op, no device read), for
    :func:`strategy_fault` should the run stop on a non-finite loss."""
    _last[run.strategy] = seen


def finite_or_unit(t: torch.Tensor) -> torch.Tensor:
    """``t`` if it is finite (a host read), else unit vectors of its shape (a fixed seed)."""
    if bool(torch.isfinite(t).all()):
        return t
    g = torch.Generator(device=t.device).manual_seed(0)
    return F.normalize(torch.randn(t.shape, generator=g, device=t.device, dtype=t.dtype), dim=-1)


def strategy_fault(run: Any) -> str:
    """Called only when the finite check stops a run: the strategy run again on its last step's
    inputs (with non-finite queries, keys or queue replaced by unit vectors); the error naming its
    class and ``negatives()`` when its negatives are non-finite from finite inputs, else ``""``
    (the strategy is not the cause it can show, or it cannot be run again here)."""
    seen = _last.get(run.strategy)
    if seen is None:
        return ""
    try:
        probe = dataclasses.replace(
            seen,
            q=finite_or_unit(seen.q),
            k=finite_or_unit(seen.k),
            queue=finite_or_unit(seen.queue),
        )
        with torch.no_grad():
            flags = value_flags(run.strategy.negatives(probe))
        bad = [field for field, flag in flags.items() if not bool(flag[0])]
    except Exception:  # noqa: BLE001  (no worse message than the learning-rate advice)
        return ""
    if not bad:
        return ""
    return str(
        fail(
            type(run.strategy),
            HOOK,
            f"returned non-finite {bad[0]} (NaN or inf) from finite queries, keys and queue",
            "keep them finite (normalise with an eps; guard divisions)",
        )
    )
