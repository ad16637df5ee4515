"""One training step: MoCo's Algorithm 1 (He et al. 2020) with the strategy's extra negatives and
the configured loss, then the optimizer step and the enqueue. The embeddings are the model's
(:meth:`pretrain.model.encoders.MoCo.embed`: queries, momentum update, shuffled keys); this module
prepares the views, asks the strategy and the loss, and updates."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from negatives.base import ExtraNegatives, StrategyInputs
from pretrain.engine.run import Run
from pretrain.errors import ConfigError
from pretrain.losses import StepTensors
from pretrain.model.encoders import split_views
from pretrain.runtime import dist, precision


@dataclass(frozen=True, kw_only=True)
class Batch:
    """One training batch, as the loaders give it (:meth:`from_loader`)."""

    x1: torch.Tensor  # (N, 3, S, S) view 1: uint8 crops when params is set, else normalised
    x2: torch.Tensor  # (N, 3, S, S) view 2, likewise
    y: torch.Tensor  # (N,) labels
    params: torch.Tensor | None = None  # (N, 2 + V, P) stage-2 rows (data.augment_on: device)
    support: torch.Tensor | None = None  # (N, V, 3, S, S) uint8 support crops (FNC)

    @classmethod
    def from_loader(cls, item: Sequence[torch.Tensor]) -> Batch:
        """A loader's ``(x1, x2, y, index[, params[, support]])``."""
        x1, x2, y, _, *rows = item
        return cls.make(x1, x2, y, rows)

    @classmethod
    def make(
        cls, x1: torch.Tensor, x2: torch.Tensor, y: torch.Tensor, rows: Sequence[torch.Tensor] = ()
    ) -> Batch:
        """The two views and labels, and the stage-2 rows that follow them in a loader's item
        (none, ``(params,)`` or ``(params, support)``)."""
        return cls(x1=x1, x2=x2, y=y, params=rows[0] if rows else None,
                   support=rows[1] if len(rows) > 1 else None)  # fmt: skip

    def tensors(self) -> list[torch.Tensor]:
        """The batch's tensors in a fixed order (:meth:`make` reads them back)."""
        return [t for t in (self.x1, self.x2, self.y, self.params, self.support) if t is not None]

    def to(self, device: torch.device) -> Batch:
        x1, x2, y, *rows = (t.to(device, non_blocking=True) for t in self.tensors())
        return Batch.make(x1, x2, y, rows)


def train_step(run: Run, batch: Batch, epoch: float) -> torch.Tensor:
    """One MoCo step with the strategy's extra negatives; returns the loss (a device scalar)."""
    x1, x2, support = views(run, batch)
    x1, x2, y = run.strategy.transform_batch(x1, x2, batch.y)  # data-level negatives
    x1 = run.loss_fn.transform_queries(x1)  # identity but for input-mixing losses (i-Mix)
    with run.autocast():  # the encoders only: negatives and the loss run in float32 below
        e = run.moco.embed(x1, x2, momentum=run.cfg.moco.momentum, symmetric=run.cfg.loss.symmetric,
                           bn_splits=run.cfg.model.bn_splits, support=support,
                           query=run.query)  # fmt: skip
    e = e.float32()
    k_all, y_all = dist.gather(e.k), dist.gather(y)  # (world*N, D): identity in one process
    extra = negatives(run, e.q, e.k, k_all, y, y_all, epoch)
    step = StepTensors(q=e.q, k=e.k, k_all=k_all, labels=y, labels_all=y_all,
                       offset=dist.rank() * e.q.shape[0], queue=run.queue.keys,
                       queue_labels=run.queue.labels, extra=extra, kappa_q=e.kappa_q,
                       kappa_k=e.kappa_k, q2=e.q2, kappa_q2=e.kappa_q2, support=e.support,
                       epoch=epoch, global_step=run.state.global_step)  # fmt: skip
    loss = run.loss_fn(step)
    if run.probe is not None:  # view 1's backbone features, detached; its own optimizer
        feats = run.probe.features
        if run.cfg.loss.symmetric:
            feats = split_views(feats, run.cfg.model.bn_splits)[0]
        run.probe.train_step(feats, y)
    run.optimizer.zero_grad(set_to_none=True)
    run.scaler.scale(loss).backward()
    run.scaler.step(run.optimizer)
    run.scaler.update()
    run.queue.enqueue(k_all, y_all)  # after the logits (and backward); never synthetic points
    return loss


def views(run: Run, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The two views (and the support views) ready for the encoders: with stage-2 rows, the
    photometric ops run here, batched (pretrain/data/augment.py); then the memory layout."""
    x1, x2, support, params = batch.x1, batch.x2, batch.support, batch.params
    if params is not None:
        x = run.data.augment(torch.cat([x1, x2]), torch.cat([params[:, 0], params[:, 1]]))
        x1, x2 = x.chunk(2)  # (N, 3, S, S) each, normalised float
        if support is not None:  # sample-major rows, so BN splits / ranks hold whole samples
            support = run.data.augment(support.flatten(0, 1), params[:, 2:].flatten(0, 1))
    if precision.channels_last(run.cfg.train.channels_last, run.cfg.train.amp, run.device):
        x1, x2 = (x.contiguous(memory_format=torch.channels_last) for x in (x1, x2))
    return x1, x2, support


def negatives(
    run: Run,
    q: torch.Tensor,
    k: torch.Tensor,
    k_all: torch.Tensor,
    y: torch.Tensor,
    y_all: torch.Tensor,
    epoch: float,
) -> ExtraNegatives:
    """The strategy's extra negatives from this rank's batch, or the global one where the
    strategy asks for it (e.g. an OC-SVM fitted on the global batch)."""
    if run.strategy.needs_global_batch:
        seen_q, seen_k, seen_y = dist.gather(q.detach()), k_all, y_all
    else:
        seen_q, seen_k, seen_y = q.detach(), k, y
    extra = run.strategy.negatives(StrategyInputs(
        q=seen_q, k=seen_k, queue=run.queue.keys, queue_labels=run.queue.labels, labels=seen_y,
        epoch=epoch, global_step=run.state.global_step, rank=dist.rank(),
        world_size=dist.world_size()))  # fmt: skip
    if run.strategy not in _CHECKED:  # once: metadata only, no host sync
        check_extra(run.strategy, extra, q)
        _CHECKED.add(run.strategy)
    return extra


#: The strategies whose first output :func:`check_extra` has passed.
_CHECKED: weakref.WeakSet = weakref.WeakSet()


def check_extra(strategy: torch.nn.Module, extra: object, q: torch.Tensor) -> None:
    """A :class:`ConfigError` naming the strategy's class and hook when its first output is not
    an :class:`ExtraNegatives` of detached ``q``-dtype tensors on ``q``'s device, ``shared``
    (M, D) and ``per_query`` (N, S, D): otherwise a traceback deep in the loss, or gradients
    through the "negatives" and a silently wrong loss."""
    where = f"negative strategy {type(strategy).__module__}.{type(strategy).__qualname__}"
    want = (f"return ExtraNegatives(shared=(M, {q.shape[1]}), per_query=({q.shape[0]}, S, "
            f"{q.shape[1]})) of detached, unit-norm {q.dtype} tensors on {q.device}")  # fmt: skip
    if not isinstance(extra, ExtraNegatives):
        raise ConfigError(f"{where}.negatives() returned a {type(extra).__name__}; {want}")
    for name, t, ndim in (("shared", extra.shared, 2), ("per_query", extra.per_query, 3)):
        if t is None:
            continue
        why = (f"a {type(t).__name__}" if not isinstance(t, torch.Tensor)
               else f"shape {tuple(t.shape)}" if t.ndim != ndim or t.shape[-1] != q.shape[1]
               or (ndim == 3 and t.shape[0] != q.shape[0])
               else f"dtype {t.dtype}" if t.dtype != q.dtype
               else f"device {t.device}" if t.device != q.device
               else "a tensor with gradient (not detached)" if t.requires_grad else "")  # fmt: skip
        if why:
            raise ConfigError(f"{where}.negatives() returned {name} of {why}; {want}")
    values = [t.detach().float() for t in (extra.shared, extra.per_query)
              if t is not None and t.numel()]  # fmt: skip
    if values:  # a device flag, read by pending_problem at the next finiteness check
        bad = torch.stack([(~torch.isfinite(t).all()) | ((t.norm(dim=-1) - 1).abs().amax() > 1e-3)
                           for t in values]).any()  # fmt: skip
        _PENDING[strategy] = (bad, f"{where}.negatives() returned non-finite or not unit-norm "
                              f"negatives at its first step; {want}")  # fmt: skip


#: The first output's values check (a device flag and its message), per strategy.
_PENDING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def pending_problem(strategy: torch.nn.Module) -> str | None:
    """The message of the first output's values check, '' if it passed, None if none is pending
    (one host sync, once per run; every rank has one pending at the same check)."""
    item = _PENDING.pop(strategy, None)
    return None if item is None else item[1] if bool(item[0]) else ""
