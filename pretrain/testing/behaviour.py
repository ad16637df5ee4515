"""What a strategy's and a loss's hooks do on tiny tensors (no trainer): the record's form,
determinism under a fixed seed, a read-only queue with no gradient into it, plain MoCo's logits
at ``zero_kwargs``; a loss's scalar, its gradient into the queries only, and its use of the
strategy's extra negatives. Sizes: a strategy's at :data:`N` x :data:`D` with a :data:`K`-key
queue (``contract_kwargs`` must fit them).

A strategy's hook is called on one instance at every step of :data:`CALLS` (:data:`PERIOD`
consecutive steps, then a few far ones), each record checked: a strategy that turns bad after
some good steps, or on every n-th call only (n <= :data:`PERIOD`), fails at the first bad call,
naming its ``s.ctx.global_step``. The host syncs of each call are counted on the same schedule
(:func:`call_steps`, :mod:`pretrain.testing.syncs`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

from negatives.base import NegativeStrategy
from negmine_core.contract.checks import check_extra, check_loss_output
from negmine_core.contract.messages import ContractError, fail
from negmine_core.step import Batch, ExtraNegatives, SetupContext, Step, StepContext

N, D, K = 8, 16, 32  # a strategy's tiny tensors: batch, width, queue
LOSS_N, LOSS_K, CLASSES = 16, 64, 4  # a loss's (the contract's training sizes), its classes
EPOCH = 1.5  # past every warm-up (contract_kwargs turn warm-ups off)
PERIOD = 32  # consecutive calls: a fault on every n-th call, n <= PERIOD, shows in them
#: (s.ctx.global_step, s.ctx.epoch) of the kit's calls of a hook, in order on one instance:
#: steps 0 to PERIOD - 1 (16 steps an epoch from EPOCH), then three far ones.
CALLS: list[tuple[int, float]] = [(i, EPOCH + i / 16) for i in range(PERIOD)] + [
    (10**3, 20.0),
    (10**4, 200.0),
    (10**5, 2000.0),
]


def unit(*size: int, g: torch.Generator) -> torch.Tensor:
    return F.normalize(torch.randn(*size, generator=g), dim=-1)


def strategy_inputs(seed: int) -> tuple[torch.Tensor, ...]:
    """(q, k, queue, queue_labels) of the strategy checks: unit rows, labels in -1..4."""
    g = torch.Generator().manual_seed(seed)
    q, k, queue = unit(N, D, g=g), unit(N, D, g=g), unit(K, D, g=g)
    return q, k, queue, torch.randint(-1, 5, (K,), generator=g)


def build_strategy(cls: type, kwargs: dict[str, Any] | None = None) -> NegativeStrategy:
    """``cls`` at ``kwargs`` (default its ``contract_kwargs``), bound to :data:`D`."""
    attribute = "contract_kwargs" if kwargs is None else "zero_kwargs"
    try:
        strategy = cls(**(cls.contract_kwargs if kwargs is None else kwargs))
    except (TypeError, ValueError) as e:
        raise fail(
            cls,
            attribute,
            f"the constructor refused it: {e}",
            "give settings the constructor accepts",
        ) from None
    strategy.setup(SetupContext(dim=D, image_size=16, mean=(0.5,) * 3, std=(0.25,) * 3))
    return strategy


def when(step: int, epoch: float) -> str:
    """A later call's step for a message (the first call's names none, as the trainer's)."""
    return "" if step == CALLS[0][0] else f" at s.ctx.global_step {step} (s.ctx.epoch {epoch:g})"


def run_strategy(
    cls: type, seed: int, kwargs: dict[str, Any] | None = None
) -> list[ExtraNegatives]:
    """``cls``'s records at every step of :data:`CALLS` (one instance), each checked
    (:func:`~negmine_core.contract.checks.check_extra`); the queue may not change."""
    torch.manual_seed(0)
    strategy = build_strategy(cls, kwargs)
    q, k, queue, labels = strategy_inputs(seed)
    before = queue.clone(), labels.clone()
    queue.requires_grad_(True)  # catches a strategy that forgets to detach what it builds
    out = []
    for step, epoch in CALLS:
        extra = strategy.negatives(
            Step.single(q, k, queue=queue, queue_labels=labels, epoch=epoch, global_step=step)
        )
        check_extra(cls, extra, q, queue, when=when(step, epoch))
        if not (torch.equal(queue.detach(), before[0]) and torch.equal(labels, before[1])):
            raise fail(
                cls,
                "negatives()",
                f"changed s.queue or s.queue_labels in place{when(step, epoch)}",
                "the queue is read-only: work on a copy (s.queue.clone())",
            )
        out.append(extra)
    return out


def same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    return (a is None) == (b is None) and (a is None or torch.equal(a, b))


def check_strategy_behaviour(cls: type) -> None:
    """The record's form, a read-only queue, determinism, shapes of transform_batch, and plain
    MoCo's logits at ``zero_kwargs``: every behaviour check of a strategy, in order."""
    check_strategy_determinism(cls)  # its records checked at each call too
    check_transform_batch(cls)
    if cls.zero_kwargs is not None:
        check_zero_kwargs(cls)


def check_records(cls: type) -> None:
    """The record's form at each of :data:`CALLS` (:func:`run_strategy`), the queue read-only."""
    run_strategy(cls, 1)


def check_strategy_determinism(cls: type) -> None:
    """Two runs of :data:`CALLS` under one seed return the same records."""
    first, second = run_strategy(cls, 1), run_strategy(cls, 1)
    for (step, epoch), a, b in zip(CALLS, first, second, strict=True):
        for field in ("shared", "per_query"):
            if not same(getattr(a, field), getattr(b, field)):
                raise fail(
                    cls,
                    "negatives()",
                    f"two runs under torch.manual_seed(0) differ in {field}{when(step, epoch)}",
                    "draw from the torch RNG (torch.rand, torch.randint), not Python's random or "
                    "numpy's, and keep no state outside buffers",
                )


def check_transform_batch(cls: type) -> None:
    """``transform_batch`` returns a :class:`~negmine_core.step.Batch` of the shapes and dtypes
    it was given."""
    torch.manual_seed(0)
    strategy = build_strategy(cls)
    batch = Batch(x1=torch.randn(N, 3, 16, 16), x2=torch.randn(N, 3, 16, 16), y=torch.arange(N))
    out = strategy.transform_batch(batch, StepContext(epoch=EPOCH))
    if not isinstance(out, Batch):
        raise fail(
            cls,
            "transform_batch()",
            f"returned {type(out).__name__}",
            "return the negmine_core.step.Batch it was given, or batch.replace(x1=..., ...)",
        )
    form = [(t.shape, t.dtype) for t in out.tensors()]
    if form != [(t.shape, t.dtype) for t in batch.tensors()]:
        raise fail(
            cls,
            "transform_batch()",
            "changed the batch's shapes or dtypes",
            "return a batch of the shapes and dtypes it was given",
        )


def check_zero_kwargs(cls: type) -> None:
    from pretrain.losses import moco_logits

    q, k, queue, _ = strategy_inputs(3)
    plain = moco_logits(q, k, queue, 0.2)
    for (step, epoch), extra in zip(CALLS, run_strategy(cls, 3, cls.zero_kwargs), strict=True):
        for t in (extra.shared, extra.per_query):
            if t is not None and t.shape[-2] != 0:
                raise fail(
                    cls,
                    "zero_kwargs",
                    f"{cls.zero_kwargs} still makes {t.shape[-2]} negatives{when(step, epoch)}",
                    "name settings that make none, or declare None",
                )
        shared = extra.shared if extra.shared is not None and extra.shared.numel() else None
        per_query = (
            extra.per_query if extra.per_query is not None and extra.per_query.numel() else None
        )
        if not torch.equal(moco_logits(q, k, queue, 0.2, shared, per_query), plain):
            raise fail(
                cls,
                "zero_kwargs",
                f"its logits differ from plain MoCo's{when(step, epoch)}",
                "return ExtraNegatives() (or empty tensors) at these settings",
            )


def build_loss(cls: type) -> torch.nn.Module:
    """``cls`` as the trainer builds it: its run settings (``from_run``) read from the digits
    recipe (moco.temperature, ...), its ``contract_kwargs``, and its ``setup`` hook run."""
    from pretrain import config
    from pretrain.config import run_settings
    from pretrain.losses.base import SetupContext

    cfg = config.load("digits_moco.yaml", [f"model.dim={D}"])  # the embedding width of the step
    try:
        settings = run_settings.values(cfg, run_settings.taken(cls), CLASSES)
        loss = cls(**settings, **cls.contract_kwargs)
    except (TypeError, ValueError) as e:
        raise fail(
            cls,
            "contract_kwargs",
            f"the constructor refused it: {e}",
            "give settings the constructor accepts",
        ) from None
    g = torch.Generator().manual_seed(9)
    features = unit(4 * CLASSES, D, g=g), torch.arange(4 * CLASSES) % CLASSES
    loss.setup(
        SetupContext(
            dim=D, num_classes=CLASSES, device=torch.device("cpu"), features=lambda: features
        )
    )
    return loss


def loss_inputs(
    cls: type, extra: str = "", seed: int = 5, step: int = 0, epoch: float = EPOCH
) -> tuple[Any, Any, dict[str, torch.Tensor]]:
    """A tiny step for a loss at ``(step, epoch)``: its :class:`~negmine_core.step.Step` (labels
    known; support views where it needs them; ``extra`` = "shared" / "per_query" negatives or none),
    the batch its ``transform_batch`` sees, and the inputs with a gradient."""
    g = torch.Generator().manual_seed(seed)
    q = unit(LOSS_N, D, g=g).requires_grad_(True)
    k, queue = unit(LOSS_N, D, g=g), unit(LOSS_K, D, g=g).requires_grad_(True)  # k: constants
    labels = torch.arange(LOSS_N) % CLASSES
    queue_labels = torch.randint(0, CLASSES, (LOSS_K,), generator=g)
    more: dict[str, torch.Tensor] = {}
    if cls.extra_views:
        more["support"] = unit(LOSS_N, max(cls.extra_views, 2), D, g=g)
    made = {"shared": unit(5, D, g=g), "per_query": unit(LOSS_N, 3, D, g=g)}
    given = ExtraNegatives(**{extra: made[extra]}) if extra else ExtraNegatives()
    tensors = Step.single(
        q,
        k,
        queue=queue,
        labels=labels,
        queue_labels=queue_labels,
        extra=given,
        epoch=epoch,
        global_step=step,
        **more,
    )
    images = torch.randn(LOSS_N, 3, 8, 8, generator=g)
    batch = Batch(x1=images, x2=images.flip(0), y=labels)
    return tensors, batch, {"q": q, "k": k, "queue": queue}


def loss_step(cls: type, extra: str = "", seed: int = 5) -> tuple[Any, dict[str, torch.Tensor]]:
    """A fresh loss's value on one tiny step (:func:`loss_inputs`), and its inputs."""
    torch.manual_seed(0)
    loss = build_loss(cls)
    tensors, batch, inputs = loss_inputs(cls, extra, seed)
    return run_loss(cls, loss, tensors, batch), inputs


def run_loss(cls: type, loss: Any, tensors: Any, batch: Any) -> torch.Tensor:
    """``loss.transform_batch`` then ``loss`` on a tiny step; a failure names the hook."""
    hook = "transform_batch()"
    try:  # the trainer calls it before the encoders (i-Mix mixes the queries here)
        loss.transform_batch(batch, tensors.ctx)
        hook = "forward()"
        return loss(tensors)
    except Exception as e:  # noqa: BLE001  (any failure of the hook: named)
        raise fail(
            cls,
            hook,
            f"raised {type(e).__name__}: {e}",
            f"it must run on a step of {LOSS_N} queries of width {D}, a {LOSS_K}-key "
            "queue, labels in 0..3 (Step.single)",
        ) from e


def call_steps(cls: type) -> Iterator[tuple[int, float, Callable[[], object]]]:
    """``(s.ctx.global_step, s.ctx.epoch, call)`` for each step of :data:`CALLS` on one instance of
    ``cls``: ``call()`` runs its hooks of one training step on inputs built before (a strategy's
    ``transform_batch`` and ``negatives``; a loss's ``transform_batch``, ``forward`` and the
    backward pass), for the host-sync count of each call."""
    torch.manual_seed(0)
    if issubclass(cls, NegativeStrategy):
        strategy = build_strategy(cls)
        q, k, queue, labels = strategy_inputs(1)
        x1, x2, y = torch.randn(N, 3, 16, 16), torch.randn(N, 3, 16, 16), torch.arange(N)
        batch = Batch(x1=x1, x2=x2, y=y)
        for step, epoch in CALLS:
            s = Step.single(
                q, k, queue=queue, queue_labels=labels, labels=y, epoch=epoch, global_step=step
            )

            def call(s: Step = s) -> object:
                strategy.transform_batch(batch, s.ctx)
                return strategy.negatives(s)

            yield step, epoch, call
        return
    loss = build_loss(cls)
    takes_none = takes_no_negatives(cls)
    for step, epoch in CALLS:
        tensors, batch, _ = loss_inputs(cls, "" if takes_none else "shared", 5, step, epoch)

        def call(tensors: Any = tensors, batch: Any = batch) -> object:
            value = run_loss(cls, loss, tensors, batch)
            value.backward()
            return value

        yield step, epoch, call


def check_loss_behaviour(cls: type) -> None:
    """A finite scalar, the same under a fixed seed, a gradient into q, none into the queue,
    and a different value when the strategy adds negatives: every behaviour check of a loss."""
    check_loss_value(cls)
    check_loss_determinism(cls)
    check_gradients(cls)
    if not takes_no_negatives(cls):
        check_extra_negatives_used(cls)


def check_loss_value(cls: type) -> None:
    """A finite scalar of a floating dtype on a tiny step."""
    value, _ = loss_step(cls)
    check_loss_output(cls, value)


def check_loss_determinism(cls: type) -> None:
    """Two fresh losses under one seed give the same value."""
    value, _ = loss_step(cls)
    again, _ = loss_step(cls)
    if not torch.equal(value.detach(), again.detach()):
        raise fail(
            cls,
            "forward()",
            "two runs under torch.manual_seed(0) differ",
            "draw from the torch RNG and keep no state outside buffers",
        )


def check_gradients(cls: type) -> None:
    """A finite, non-zero gradient into the queries, none into the queue."""
    value, inputs = loss_step(cls)
    value.backward()
    grad = inputs["q"].grad
    if grad is None or not bool(torch.isfinite(grad).all()) or not bool(grad.abs().sum() > 0):
        raise fail(
            cls,
            "forward()",
            "no finite, non-zero gradient reaches the queries s.emb.q",
            "compute the loss from s.emb.q (the only input with a gradient)",
        )
    g = inputs["queue"].grad
    if g is not None and bool(g.abs().sum() > 0):
        raise fail(
            cls,
            "forward()",
            "a gradient reaches s.queue",
            "detach it (s.queue.detach()): the queue's keys are constants",
        )


def takes_no_negatives(cls: type) -> bool:
    """A loss that accepts strategy ``none`` only (it uses no strategy's negatives)."""
    return cls.accepts_strategies is not None and set(cls.accepts_strategies) <= {"none"}


def check_extra_negatives_used(cls: type) -> None:
    """The value changes when the strategy adds negatives (shared, then per-query)."""
    value, _ = loss_step(cls)
    for field in ("shared", "per_query"):
        with_extra, _ = loss_step(cls, field)
        if torch.equal(with_extra.detach(), value.detach()):
            raise fail(
                cls,
                "forward()",
                f"its value is the same with and without the "
                f"strategy's extra negatives (extra.{field})",
                "use s.extra.shared and s.extra.per_query as negatives (as "
                "pretrain.losses.moco_logits and contrast_set do), or declare "
                "accepts_strategies = ('none',)",
            )


__all__ = ["ContractError", "check_loss_behaviour", "check_strategy_behaviour"]
