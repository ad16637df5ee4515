"""The trainer's checks of a strategy's record (:class:`~negmine_core.step.ExtraNegatives`) in
every training step, so that a strategy that breaks the contract only later (after 8 good steps,
on every 5th call) is named, not a divergence blamed on the learning rate. One
:class:`StepWatch` per run holds them (``Run.watch``):

- the record's form, host metadata only (no device read, no op): of an ExtraNegatives, shapes,
  dtype, device, and no gradient (``requires_grad``, an ``nn.Parameter`` included). Checked
  before the loss sees it, every step; a failure stops the run at that step
  (:class:`StepContractError`, exit 1) naming the strategy's class, ``negatives()`` and the step;
- its values, on the device: each returned tensor's largest ``|norm - 1|`` (NaN or inf when it
  is not finite: :func:`~negmine_core.contract.checks.deviation`), kept as a running maximum over
  the steps whose queries, keys and queue were finite (a strategy fed a diverged model's NaNs is
  not blamed), with no host read: 9 aten ops per step for the inputs and 8 per returned tensor.
  The finite check reads them at each log step (:meth:`StepWatch.at_log`, one read, where it
  reads the loss anyway) and stops the run naming the class, the hook and the steps since its
  last read.

At the first step the loss is checked too: one that returns a non-finite value from finite
queries and negatives is named (:meth:`StepWatch.after_loss`). Past the checks, the watch keeps a
reference to each step's record as the strategy saw it (:meth:`StepWatch.remember`: no op, no
read) and, only when the finite check stops a run, runs the strategy again on it
(:meth:`StepWatch.strategy_fault`, non-finite inputs replaced by unit vectors).

Under ``train.cuda_graphs`` the form is checked in the eager steps and the captured one (a replay
runs no Python), the values in every step (the graph holds the device ops that update the
maxima). The contract kit's counted runs have no watch (``Run.watch = None``): its counts
measure the strategy's and the loss's step, not the trainer's check of it."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from negmine_core.contract.checks import HOOK, check_extra, deviation, tolerance, value_fault
from negmine_core.contract.messages import ContractError, fail
from negmine_core.step import Embeddings, ExtraNegatives, Step

FIELDS = ("shared", "per_query")
FINITE_IN = " from finite queries, keys and queue"


class StepContractError(RuntimeError):
    """A strategy or loss broke the contract in a training step (a run error, exit 1)."""


@dataclasses.dataclass
class Watch:
    """The device maxima of a strategy's record's values since the last read, and the steps they
    cover."""

    start: int  # s.ctx.global_step of the first step checked (its form errors name no step)
    since: int  # s.ctx.global_step of the first step not read yet
    last: int = -1  # s.ctx.global_step of the latest step checked
    worst: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)  # field -> f64
    tol: dict[str, float] = dataclasses.field(default_factory=dict)  # field -> its tolerance
    loss: torch.Tensor | None = None  # the first step's (loss finite, queries finite)
    loss_class: type | None = None

    def when(self) -> str:
        """The steps since the last read, for a message."""
        if self.since == self.last == 0:
            return " at the first step"
        if self.since == self.last:
            return f" at s.ctx.global_step {self.last}"
        return f" at an s.ctx.global_step from {self.since} to {self.last}"


class StepWatch:
    """The per-step checks of one run's strategy and loss (the trainer keeps one on its run).

    Args:
        strategy: the strategy's class (named by the messages).
        loss: the loss's class.
        symmetric: ``loss.symmetric``: per-query negatives then need rows for both views' queries.
    """

    def __init__(self, strategy: type, loss: type, *, symmetric: bool = False) -> None:
        self.strategy, self.loss, self.symmetric = strategy, loss, symmetric
        self.watch: Watch | None = None  # from the first step checked
        self.seen: Step | None = None  # the latest step's record, as the strategy saw it

    @property
    def started(self) -> bool:
        """Whether a step has been checked."""
        return self.watch is not None

    def remember(self, seen: Step) -> None:
        """Keep a reference to this step's record as the strategy sees it (no op, no device
        read), for :meth:`strategy_fault` should the run stop on a non-finite loss."""
        self.seen = seen

    def before_loss(self, step: Step) -> None:
        """The record's form (host metadata) every step: StepContractError naming the
        strategy's class and the step; its values as device maxima (no read)."""
        at = step.ctx.global_step
        if self.watch is None:
            self.watch = Watch(start=at, since=at)
        watch = self.watch
        watch.last = at
        n = step.emb.q.shape[0] * (2 if self.symmetric else 1)
        try:
            check_extra(
                self.strategy,
                step.extra,
                step.emb.q,
                step.queue,
                rows=n,
                because="loss.symmetric=true" if self.symmetric else "",
                fix_rows="declare symmetric_ok = False (its negatives are the first view's)",
                dtypes=(step.emb.k.dtype, step.emb.q.dtype),
                values=False,
                when="" if at == watch.start else f" at s.ctx.global_step {at}",
            )
        except ContractError as e:
            raise StepContractError(str(e)) from None
        track(watch, step.extra, self.seen)

    def after_loss(self, step: Step, loss: torch.Tensor) -> None:
        """At the first step, the loss's value and its queries as device flags, read at the
        first log step."""
        watch = self.watch
        if watch is None or watch.loss_class is not None:
            return
        watch.loss = torch.stack(
            [torch.isfinite(loss.detach()).all(), torch.isfinite(step.emb.q.detach()).all()]
        )
        watch.loss_class = self.loss

    def at_log(self, steps_done: int) -> None:
        """Read the values checked since the last read (one host read, at a log step, after
        ``steps_done`` optimizer steps): StepContractError naming the strategy (non-finite or
        non-unit negatives from finite inputs) or, at the first step, the loss (non-finite on
        finite inputs)."""
        watch = self.watch
        if watch is None:
            return
        # the steps done: a captured step (train.cuda_graphs) updates the maxima, runs no Python
        watch.last = max(watch.last, steps_done - 1)
        if watch.last < watch.since:
            return
        fields, first_loss = list(watch.worst), watch.loss
        parts = [watch.worst[f].reshape(1) for f in fields]
        if first_loss is not None:
            parts.append(first_loss.double())
        values = torch.cat(parts).tolist() if parts else []
        for field, worst in zip(fields, values, strict=False):
            fault = value_fault(
                self.strategy, field, worst, watch.tol[field], watch.when(), inputs=FINITE_IN
            )
            if fault is not None:
                raise StepContractError(str(fault))
        watch.since, watch.loss = watch.last + 1, None
        if first_loss is not None:
            loss_finite, q_finite = values[len(fields) :]
            if q_finite and not loss_finite:
                cls = watch.loss_class
                raise StepContractError(
                    f"loss {getattr(cls, 'name', cls.__name__)!r} ({cls.__module__}."
                    f"{cls.__qualname__}.forward()): non-finite at the first step from finite "
                    "queries and negatives: keep it finite (an eps in logs and divisions)"
                )

    def strategy_fault(self, strategy: torch.nn.Module) -> str:
        """Called only when the finite check stops a run: ``strategy`` run again on its last
        step's record (with non-finite queries, keys or queue replaced by unit vectors); the
        error naming its class and ``negatives()`` when its negatives are non-finite from finite
        inputs, else ``""`` (the strategy is not the cause it can show, or it cannot be run
        again here)."""
        seen = self.seen
        if seen is None:
            return ""
        try:
            probe = seen.replace(
                emb=Embeddings(q=finite_or_unit(seen.emb.q.detach()), k=finite_or_unit(seen.emb.k)),
                k_all=finite_or_unit(seen.k_all),
                q_all=None if seen.q_all is None else finite_or_unit(seen.q_all),
                queue=finite_or_unit(seen.queue),
            )
            with torch.no_grad():
                extra = strategy.negatives(probe)
            bad = [
                field
                for field in FIELDS
                if isinstance(t := getattr(extra, field), torch.Tensor)
                and t.numel()
                and not bool(torch.isfinite(t).all())
            ]
        except Exception:  # noqa: BLE001  (no worse message than the learning-rate advice)
            return ""
        if not bad:
            return ""
        return str(
            fail(
                type(strategy),
                HOOK,
                f"returned non-finite {bad[0]} (NaN or inf){FINITE_IN}",
                "keep them finite (normalise with an eps; guard divisions)",
            )
        )


def track(watch: Watch, extra: ExtraNegatives, seen: Step | None) -> None:
    """Fold this step's :func:`~negmine_core.contract.checks.deviation` of each returned tensor
    into ``watch``'s running maxima (device ops: a NaN stays NaN), where its inputs were
    finite."""
    given = [(f, t) for f in FIELDS if (t := getattr(extra, f)) is not None and t.numel()]
    if not given:
        return
    finite_in = None
    if seen is not None:  # a sum is NaN or inf iff a term is (unit rows cannot overflow)
        q, k, _ = seen.detached()
        sums = torch.stack([q.sum(), k.sum(), seen.queue.sum()])
        finite_in = torch.isfinite(sums).all()
    for field, t in given:
        off = deviation(t)
        if finite_in is not None:
            off = torch.where(finite_in, off, 0.0)
        worst = watch.worst.get(field)
        if worst is None:
            watch.worst[field] = off
        else:
            torch.maximum(worst, off, out=worst)
        watch.tol[field] = max(watch.tol.get(field, 0.0), tolerance(t.dtype))


def finite_or_unit(t: torch.Tensor) -> torch.Tensor:
    """``t`` if it is finite (a host read), else unit vectors of its shape (a fixed seed)."""
    if bool(torch.isfinite(t).all()):
        return t
    g = torch.Generator(device=t.device).manual_seed(0)
    return F.normalize(torch.randn(t.shape, generator=g, device=t.device, dtype=t.dtype), dim=-1)
