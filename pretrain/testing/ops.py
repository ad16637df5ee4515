"""Aten ops per training step (a CPU-measurable proxy for CUDA kernel launches) against a budget
relative to plain MoCo's step: ``ops_budget`` where the class declares one (its cost, e.g. 1.2 =
+120 %), else :data:`DEFAULT_BUDGET` (+15 %). negmine's own pins for the built-ins are exact
(``tests/helpers/op_table.py``); a class without a pin is held to this bound, by the kit and the
suite alike (:func:`check_bound`).

The kit counts a class's step at two batch sizes (:data:`BATCHES`, 16 and 32), beside plain
MoCo's at both: a vectorised step dispatches the same ops at any batch, a Python loop over rows
one more per row, which a count at one small batch hides (+7 % at 16 rows can be +96 % at 256).
The growth from 16 to 32 rows, extrapolated linearly to :data:`HELD_AT` (512, the recipes'
batch), must stay within the same budget (:func:`check_growth`), and a failure advises
vectorising, never a larger ``ops_budget``: a cost that grows with the batch has no fixed
fraction to declare."""

from __future__ import annotations

from functools import cache
from typing import Any

from negmine_core.contract.messages import ContractError, kind_of
from pretrain.testing import steps

DEFAULT_BUDGET = 0.15  # what an undeclared strategy or loss may add to plain MoCo's step
BATCHES = (16, 32)  # the batch sizes counted (train.batch_size; the queue: 64 keys)
HELD_AT = 512  # the batch the growth is extrapolated to and held at (the CIFAR recipes')


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


def at_batch(counts: dict[int, int], batch: int) -> float:
    """The ops per step at ``batch``, extrapolated linearly from ``counts`` ({batch: ops} at
    the two :data:`BATCHES`)."""
    (b0, n0), (b1, n1) = sorted(counts.items())
    return n0 + (n1 - n0) * (batch - b0) / (b1 - b0)


def check_growth(
    kind: str, name: str, cls: type, recipe: str, counts: dict[int, int], base: dict[int, int]
) -> None:
    """ContractError naming the class and the hook when its ops per step (``counts``, {batch:
    ops}) grow with the batch faster than plain MoCo's (``base``) so that at :data:`HELD_AT` they
    pass the class's budget; the fix is vectorising (no ``ops_budget`` advice)."""
    allowed = budget(cls)
    (b0, n0), (b1, n1) = sorted(counts.items())
    n, b = at_batch(counts, HELD_AT), at_batch(base, HELD_AT)
    if n1 - n0 <= base[b1] - base[b0] or n <= (1 + allowed) * b:
        return  # no faster growth than plain MoCo's: the level is check_bound's
    hook = "negatives() / transform_batch()" if kind == "strategy" else "forward()"
    declared = getattr(cls, "ops_budget", None)
    said = "the default" if declared is None else f"its ops_budget = {declared}"
    raise ContractError(
        f"{kind} {name!r} ({cls.__module__}.{cls.__qualname__}.{hook.split(' ')[0]}): its aten "
        f"ops per training step grow with the batch: {n0} at batch {b0}, {n1} at batch {b1} on "
        f"{recipe} (plain MoCo's: {base[b0]}, {base[b1]}), so about {n:.0f} at batch "
        f"{HELD_AT}, +{(n - b) / b:.0%} over plain MoCo's {b:.0f}, more than +{allowed:.0%} "
        f"({said}): vectorise its {hook} (batched tensor ops, no Python loop over rows or "
        "samples): a cost that grows with the batch is no fixed fraction that ops_budget could "
        "declare; pretrain.testing.OpCounter(sites=True) shows where the ops come from"
    )


@cache
def plain_moco(recipe: str = steps.RECIPE, batch: int = BATCHES[0]) -> int:
    """Plain MoCo's ops per step (infonce, strategy none) at ``batch`` here, counted once per
    process."""
    with steps.on_cpu():
        return steps.count_ops(steps.setup(recipe, steps.op_sizes(batch))).count


def check_ops(cls: type) -> dict[str, Any]:
    """Count ``cls``'s ops per step (:mod:`steps`) at both :data:`BATCHES` and hold their growth
    (:func:`check_growth`), then the count at the first, to its budget (:func:`check_bound`);
    returns ``{"ops", "plain_moco", "added", "budget", "by_batch"}`` for the report."""
    kind = kind_of(cls)
    base = {batch: plain_moco(steps.RECIPE, batch) for batch in BATCHES}
    counts = {}
    with steps.registered(cls) as name, steps.on_cpu():
        for batch in BATCHES:
            sizes = [*steps.op_sizes(batch), *steps.overrides_of(kind, name)]
            counts[batch] = steps.count_ops(steps.setup(steps.RECIPE, sizes)).count
        check_growth(kind, name, cls, steps.RECIPE, counts, base)
        n, b = counts[BATCHES[0]], base[BATCHES[0]]
        check_bound(kind, name, cls, steps.RECIPE, n, b)
    return {"ops": n, "plain_moco": b, "added": (n - b) / b, "budget": budget(cls),
            "by_batch": counts}  # fmt: skip
