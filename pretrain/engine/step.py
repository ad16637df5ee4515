"""One training step: MoCo's Algorithm 1 (He et al. 2020) with the strategy's extra negatives and
the configured loss, then the optimizer step and the enqueue. The embeddings are the model's
(:meth:`pretrain.model.encoders.MoCo.embed`: queries, momentum update, shuffled keys, with the
run's constants set at construction); this module runs the batch through the strategy, the model
and the loss, and updates. The batch keeps one form (:class:`~negmine_core.step.Batch`) from the
loader to the loss, and one :class:`~negmine_core.step.StepContext` goes to the strategy and the
loss alike."""

from __future__ import annotations

import torch

from negmine_core.step import Batch, Embeddings, ExtraNegatives, Step, StepContext
from pretrain.engine.run import Run
from pretrain.runtime import dist


def train_step(run: Run, batch: Batch, epoch: float) -> torch.Tensor:
    """One MoCo step with the strategy's extra negatives; returns the loss (a device scalar)."""
    ctx = StepContext(
        epoch=epoch,
        global_step=run.state.global_step,
        rank=dist.rank(),
        world_size=dist.world_size(),
    )
    batch = photometric(run, batch)  # stage 2 of the augmentation, batched on the device
    batch = run.strategy.transform_batch(batch, ctx)  # data-level negatives (outliers)
    batch = run.loss_fn.transform_batch(batch, ctx)  # the loss's input (i-Mix mixes x1)
    with run.autocast():  # the encoders only: negatives and the loss run in float32 below
        e = run.moco.embed(batch)
    e = e.float32()
    k_all, y_all = dist.gather(e.k), dist.gather(batch.y)  # (world*N, D): identity in one process
    keys, key_labels = enqueued(e, k_all, y_all)
    step = Step(
        emb=e,
        k_all=k_all,
        labels=batch.y,
        labels_all=y_all,
        queue=run.queue.keys,
        queue_labels=run.queue.labels,
        ctx=ctx,
        q_all=dist.gather(e.q.detach()) if run.strategy.needs_global_batch else None,
    )
    step = step.replace(extra=negatives(run, step))  # the record the loss gets: the same one
    if run.watch is not None:  # the strategy's record's form, named if wrong; values on device
        run.watch.before_loss(step)
    loss = run.loss_fn(step)
    if run.watch is not None:  # the first step's loss: read at the first log step, no sync here
        run.watch.after_loss(step, loss)
    if run.probe is not None:  # view 1's backbone features, detached; its own optimizer
        run.probe.train_step(e.features, batch.y)
    run.optimizer.zero_grad(set_to_none=True)
    run.scaler.scale(loss).backward()
    run.scaler.step(run.optimizer)
    run.scaler.update()
    run.queue.enqueue(keys, key_labels)  # after the logits (and backward); never synthetic points
    return loss


def enqueued(
    e: Embeddings, k_all: torch.Tensor, y_all: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys this step enqueues and their labels: every rank's keys of view 2 (``k_all``);
    with ``moco.symmetric_keys`` every rank's keys of view 1, then of view 2 (2B): the demo's
    ``torch.cat([k1, k2])`` on the global batch, so that R ranks enqueue what one process does
    (facebookresearch/moco, branch colab-notebook, ``colab/moco_cifar10_demo.ipynb`` at f736491)."""
    if e.k1 is None:
        return k_all, y_all
    return torch.cat([dist.gather(e.k1), k_all]), torch.cat([y_all, y_all])


def photometric(run: Run, batch: Batch) -> Batch:
    """With stage-2 rows (``data.augment_on: device``), the photometric ops run here, batched
    (pretrain/data/augment.py): the views, and FNC's support views as (N * V, 3, S, S)."""
    params, support = batch.params, batch.support
    if params is None:
        return batch
    # one call for both views (each image with its own row), concatenated straight into float
    x = run.data.augment((batch.x1, batch.x2), torch.cat([params[:, 0], params[:, 1]]))
    x1, x2 = x.chunk(2)  # (N, 3, S, S) each, normalised float, channels-last memory
    if support is not None:  # sample-major rows, so BN splits / ranks hold whole samples
        support = run.data.augment(support.flatten(0, 1), params[:, 2:].flatten(0, 1))
    return batch.replace(x1=x1, x2=x2, support=support)


def negatives(run: Run, step: Step) -> ExtraNegatives:
    """The strategy's extra negatives from the step's record: it reads this rank's batch, or
    every rank's where it declares ``needs_global_batch`` (``step.q_all``; e.g. an OC-SVM
    fitted on the global batch), through ``step.detached()``."""
    if run.watch is not None:  # a reference, read only if a non-finite loss stops the run
        run.watch.remember(step)
    return run.strategy.negatives(step)
