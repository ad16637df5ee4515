"""Host syncs per training step measured against what the classes declare (``syncs_per_step``):
one class (:func:`check_syncs`, the kit's) or one loss x strategy pair of negmine's table
(:func:`check_pair`, ``tests/helpers/sync_table.py``'s). The kit's count of a class is two: its real
training steps (:mod:`steps`: step 0 and the counted steps, against the declaration), and each
of :data:`~pretrain.testing.behaviour.CALLS` of its hooks alone on one instance
(:func:`check_call_syncs`: s.ctx.global_step 0 to PERIOD - 1 and three far steps), whose counts must
all be the same, so that a sync on every n-th call only (n <= PERIOD = 32) or from a later step on
shows."""

from __future__ import annotations

from typing import Any

from negmine_core.contract.messages import ContractError, at, kind_of
from negmine_core.contract.sync_counter import SyncCounter
from pretrain.testing import behaviour, steps


def declared(loss: str, strategy: str, extra: int = 0) -> int:
    """The count ``loss`` x ``strategy`` declare (their ``syncs_per_step``), + ``extra`` (the
    model's own: the kappa head's, split BN's)."""
    import negatives
    from pretrain import losses

    base = losses.registry.get(loss).syncs_per_step
    return base + negatives.strategies.get(strategy).syncs_per_step + extra


def who(loss: str, strategy: str) -> str:
    """Where each side's count is declared, for a failure message."""
    import negatives
    from pretrain import losses

    lc, sc = losses.registry.get(loss), negatives.strategies.get(strategy)
    return (
        f"{lc.__module__}.{lc.__qualname__}.syncs_per_step = {lc.syncs_per_step} (loss "
        f"{loss!r}) + {sc.__module__}.{sc.__qualname__}.syncs_per_step = "
        f"{sc.syncs_per_step} (strategy {strategy!r})"
    )


FIX = (
    "remove the sync (no .item(), float(t), bool(t), boolean-mask indexing, .cpu() or "
    '.to("cpu") in the step: fixed-shape tensor ops) or declare the count in syncs_per_step '
    "and say where in syncs_why"
)


def shown(where: list[str], most: int = 6) -> str:
    """The first ``most`` places a sync was measured at, and how many more."""
    more = f" ... and {len(where) - most} more" if len(where) > most else ""
    return "; ".join(where[:most]) + more


def check_pair(pair: str, got: dict[str, Any], want: int, why: str) -> None:
    """ContractError naming ``why`` (the declaring classes) when a pair's measured count
    (``got``: :func:`steps.count_syncs`) differs from ``want``, in any counted step or step 0."""
    for count in got["counts"]:
        if count != want:
            raise ContractError(
                f"{pair}: {count} host syncs per step, declared {want}: {why}; measured at: "
                f"{shown(got['where'])}: {FIX}"
            )
    # the first step too: nothing is built lazily in a step (a per-device constant's
    # host-to-device copy would sync there once; CUDA's sync-debug mode raises on it)
    first = got["first"]
    if first["count"] != want:
        raise ContractError(
            f"{pair} step 0: {first['count']} host syncs, declared {want}: {why}; measured at: "
            f"{shown(first['where'])}: build per-device constants at construction or .to(), not in "
            "the first step"
        )


def pair_of(kind: str, name: str) -> tuple[str, str]:
    """The (loss, strategy) a class is counted in: a strategy with the recipe's loss (infonce;
    nt_xent where it replaces the queue), a loss with strategy none."""
    if kind == "loss":
        return name, "none"
    import negatives

    return ("nt_xent" if negatives.strategies.get(name).replaces_queue else "infonce"), name


def check_call_syncs(cls: type) -> list[int]:
    """The host syncs of each of the kit's calls of ``cls``'s hooks
    (:func:`behaviour.call_steps`); a ContractError naming the class, ``syncs_per_step`` and
    the calls where they are not all the same. Returns the counts, one per call."""
    counts, where, steps_of = [], {}, []
    for step, _, call in behaviour.call_steps(cls):
        with SyncCounter() as syncs:
            call()
        counts.append(syncs.count)
        steps_of.append(step)
        where.setdefault(syncs.count, [f"{s.kind}: {s.where()}" for s in syncs.syncs])
    usual = max(set(counts), key=counts.count)
    odd = [(step, n) for step, n in zip(steps_of, counts, strict=True) if n != usual]
    if odd:
        hooks = "negatives() and transform_batch()" if kind_of(cls) == "strategy" else "forward()"
        listed = ", ".join(f"{n} at s.ctx.global_step {step}" for step, n in odd[:8])
        more = f" and {len(odd) - 8} more" if len(odd) > 8 else ""
        seen = where[odd[0][1]] or where[usual]
        raise ContractError(
            f"{at(cls, 'syncs_per_step')} = {cls.syncs_per_step}: host syncs per call of its "
            f"{hooks} differ between calls: {listed}{more}, {usual} at the other "
            f"{len(counts) - len(odd)} of {len(counts)} calls; measured at: {shown(seen)}: "
            "make every step sync the same (a sync on some calls only is one a step can hide): "
            f"{FIX}"
        )
    return counts


def check_syncs(cls: type) -> dict[str, Any]:
    """Count ``cls``'s host syncs in real training steps (:mod:`steps`) and raise a
    ContractError naming the class and ``syncs_per_step`` where they differ from its
    declaration (with its partner's, which is 0 for infonce and none), then in each call of its
    hooks alone (:func:`check_call_syncs`). Returns the counts (``"calls"``: per call)."""
    kind = kind_of(cls)
    with steps.registered(cls) as name, steps.on_cpu():
        loss, strategy = pair_of(kind, name)
        overrides = [*steps.SYNC_SIZES, *steps.loss_overrides(loss)]
        overrides += steps.strategy_overrides(strategy)
        got = steps.count_syncs(steps.setup(steps.RECIPE, overrides))
        want = declared(loss, strategy)
        why = f"{at(cls, 'syncs_per_step')} = {cls.syncs_per_step}; " + who(loss, strategy)
        check_pair(f"{loss}/{strategy}", got, want, why)
    got["calls"] = check_call_syncs(cls)
    return got
