"""Aten ops per training step (a CPU-measurable proxy for CUDA kernel launches) against a budget
relative to plain MoCo's step: ``ops_budget`` where the class declares one (its cost, e.g. 1.2 =
+120 %), else :data:`DEFAULT_BUDGET` (+15 %). negmine's own pins for the built-ins are exact
(``tests/op_table.py``); a class without a pin is held to this bound, by the kit and the suite
alike (:func:`check_bound`)."""

from __future__ import annotations

from functools import cache
from typing import Any

from pretrain.engine.failures import ContractError, kind_of
from pretrain.testing import steps

DEFAULT_BUDGET = 0.15  # what an undeclared strategy or loss may add to plain MoCo's step


def budget(cls: type) -> float:
    """The fraction ``cls`` may add to plain MoCo's step: its ``ops_budget``, or the default."""
    declared = getattr(cls, "ops_budget", None)
    return DEFAULT_BUDGET if declared is None else float(declared)


def check_bound(kind: str, name: str, cls: type, recipe: str, n: int, base: int) -> None:
    """ContractError naming the class, the hook that adds the ops and ``ops_budget`` when ``n``
    ops per step exceed plain MoCo's ``base`` by more than the class's budget."""
    allowed = budget(cls)
    bound = (1 + allowed) * base
    if n <= bound:
        return
    hook = "negatives() / transform_batch()" if kind == "strategy" else "forward()"
    declared = getattr(cls, "ops_budget", None)
    said = "the default" if declared is None else f"its ops_budget = {declared}"
    need = (n - base) / base
    raise ContractError(
        f"{kind} {name!r} ({cls.__module__}.{cls.__qualname__}.{hook.split(' ')[0]}): {n} aten "
        f"ops per training step on {recipe}, more than +{allowed:.0%} over plain MoCo's {base} "
        f"(at most {int(bound)}, {said}): vectorise its {hook}, or declare its cost on the "
        f"class: {cls.__qualname__}.ops_budget = {need:.2f} (+{need:.0%}); "
        "pretrain.testing.OpCounter(sites=True) shows where the ops come from"
    )


@cache
def plain_moco(recipe: str = steps.RECIPE) -> int:
    """Plain MoCo's ops per step (infonce, strategy none) here, counted once per process."""
    with steps.on_cpu():
        return steps.count_ops(steps.setup(recipe, steps.OP_SIZES)).count


def check_ops(cls: type) -> dict[str, Any]:
    """Count ``cls``'s ops per step (:mod:`steps`) and hold them to its budget; returns
    ``{"ops", "plain_moco", "added", "budget"}`` for the report."""
    kind = kind_of(cls)
    base = plain_moco()
    with steps.registered(cls) as name, steps.on_cpu():
        run = steps.setup(steps.RECIPE, [*steps.OP_SIZES, *steps.overrides_of(kind, name)])
        n = steps.count_ops(run).count
        check_bound(kind, name, cls, steps.RECIPE, n, base)
    return {"ops": n, "plain_moco": base, "added": (n - base) / base, "budget": budget(cls)}
