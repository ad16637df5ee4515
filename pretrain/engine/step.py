"""One training step: MoCo's Algorithm 1 (He et al. 2020) with the strategy's extra negatives and
the configured loss, then the optimizer step and the enqueue."""

from __future__ import annotations

import torch

from negatives.base import StrategyInputs
from pretrain.engine.run import Run
from pretrain.losses import StepTensors
from pretrain.runtime import dist, precision


def train_step(
    run: Run,
    x1: torch.Tensor,
    x2: torch.Tensor,
    y: torch.Tensor,
    epoch: float,
    params: torch.Tensor | None = None,
    support: torch.Tensor | None = None,
) -> torch.Tensor:
    """One MoCo step (Algorithm 1 of He et al. 2020) with the strategy's extra negatives.
    ``params`` (N, 2 + V, P): with ``data.augment_on: device``, x1 and x2 are uint8 crops and the
    photometric ops run here, batched (stage 2, pretrain/data/augment.py); ``support`` (N, V, 3, S,
    S): ``data.support_views`` extra crops (FNC), their keys passed to the loss."""
    if params is not None:
        x = run.data.augment(torch.cat([x1, x2]), torch.cat([params[:, 0], params[:, 1]]))
        x1, x2 = x.chunk(2)  # (N, 3, S, S) each, normalised float
        if support is not None:  # sample-major rows, so BN splits / ranks hold whole samples
            support = run.data.augment(support.flatten(0, 1), params[:, 2:].flatten(0, 1))
    if precision.channels_last(run.cfg.train.channels_last, run.cfg.train.amp, run.device):
        x1, x2 = (x.contiguous(memory_format=torch.channels_last) for x in (x1, x2))
    x1, x2, y = run.strategy.transform_batch(x1, x2, y)
    x1 = run.loss_fn.transform_queries(x1)  # identity but for input-mixing losses (i-Mix)
    with run.autocast():  # the encoders only: negatives and the loss run in float32 below
        if run.cfg.loss.symmetric:  # both views through the query encoder in one batch (SupCon)
            splits = run.cfg.model.bn_splits
            z, kappa = run.query(pair_views(x1, x2, splits), with_kappa=True)  # (2N, D)
            (q, q2), (kappa_q, kappa_q2) = split_views(z, splits), split_views(kappa, splits)
        else:
            q, kappa_q = run.query(x1, with_kappa=True)  # queries (N, D); kappa (N,) or None
            q2 = kappa_q2 = None
        k, kappa_k = run.moco.keys(x2, run.cfg.moco.momentum, with_kappa=True)  # momentum first
        if support is not None:  # (N * V, D) -> (N, V, D), the updated key encoder, no grad
            support = run.moco.encode_keys(support).unflatten(0, (x2.shape[0], -1))
    q, q2, k, kappa_q, kappa_q2, kappa_k, support = map(
        precision.full, (q, q2, k, kappa_q, kappa_q2, kappa_k, support)
    )  # float32 from here
    k_all, y_all = dist.gather(k), dist.gather(y)  # (world*N, D): identity in one process
    if run.strategy.needs_global_batch:  # e.g. an OC-SVM fitted on the global batch
        seen_q, seen_k, seen_y = dist.gather(q.detach()), k_all, y_all
    else:
        seen_q, seen_k, seen_y = q.detach(), k, y
    extra = run.strategy.negatives(StrategyInputs(
        q=seen_q, k=seen_k, queue=run.queue.keys, queue_labels=run.queue.labels, labels=seen_y,
        epoch=epoch, global_step=run.state.global_step, rank=dist.rank(),
        world_size=dist.world_size()))  # fmt: skip
    step = StepTensors(q=q, k=k, k_all=k_all, labels=y, labels_all=y_all,
                       offset=dist.rank() * q.shape[0], queue=run.queue.keys,
                       queue_labels=run.queue.labels, extra=extra, kappa_q=kappa_q,
                       kappa_k=kappa_k, q2=q2, kappa_q2=kappa_q2, support=support, epoch=epoch,
                       global_step=run.state.global_step)  # fmt: skip
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


def pair_views(x1: torch.Tensor, x2: torch.Tensor, splits: int) -> torch.Tensor:
    """One (2N, ...) batch of both views whose BatchNorm split r holds [view 1; view 2] of the
    r-th chunk of images: what rank r forwards under DDP, so one process equals DDP."""
    return torch.cat([x1.unflatten(0, (splits, -1)), x2.unflatten(0, (splits, -1))], 1).flatten(
        0, 1
    )


def split_views(
    z: torch.Tensor | None, splits: int
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Inverse of :func:`pair_views` on the outputs: (view 1 rows, view 2 rows), or (None, None)."""
    if z is None:
        return None, None
    halves = z.unflatten(0, (splits, -1)).chunk(2, dim=1)
    return halves[0].flatten(0, 1), halves[1].flatten(0, 1)
