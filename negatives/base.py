"""The interface every negative strategy implements: two hooks the trainer calls each step."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from negmine_core.contract import Contract
from negmine_core.registry import Registry
from negmine_core.step import ONE_PROCESS, Batch, ExtraNegatives, SetupContext, Step, StepContext

#: The negative strategies (``negatives.name``); kwargs left None in a config take the defaults.
#: Installed packages add their own through the entry point group ``negmine.strategies``.
strategies: Registry[Any] = Registry(
    "negative strategy", drop_none=True, group="negmine.strategies"
)
#: The most synthetic points a strategy makes per query and step (MoCHi's num_mix and
#: num_query_mix, MiOC's counts): the papers use 1024 or fewer, and a count far above it
#: would take its memory before the first step could fail.
MAX_SYNTHETIC = 16384


class NegativeStrategy(Contract, nn.Module):
    """Base class: identity on the batch and no extra negatives.

    State that must survive a resume (refit counters, cached support vectors) lives in registered
    buffers, so it travels in ``state_dict`` and follows ``.to(device)``. The trainer never looks
    inside a strategy: it calls [`transform_batch`][negatives.NegativeStrategy.transform_batch]
    before the forward passes, [`negatives`][negatives.NegativeStrategy.negatives] (with the step's
    [`Step`][negmine_core.step.Step], the record the loss gets too) between the key forward and the
    loss, and [`diagnostics`][negatives.NegativeStrategy.diagnostics] only on logging steps (so a
    strategy keeps its statistics as device tensors and never syncs per step).

    Randomness comes from the global torch RNG of the device, which checkpoints save and restore,
    and which every DDP rank shares (same seed): ranks that see the same gathered batch draw the
    same synthetic points.
    """

    #: The contract's kind of class (``negmine_core.contract.Contract.kind``).
    kind = "strategy"
    #: The registry of strategies (``negatives.name``), which the contract's messages read.
    registry = strategies

    # -- The contract (negmine_core.contract.Contract: syncs_per_step, syncs_why, capturable,
    # why_not_capturable, step_state, contract_kwargs), and for strategies only:
    #: ``negatives.kwargs`` that make zero synthetic points, whose logits must then be plain
    #: MoCo's; None: no such limit (the contract test says so and skips).
    zero_kwargs: ClassVar[dict[str, Any] | None] = None

    #: False when the strategy's negatives belong to the first view's queries only (per-query
    #: negatives), so ``loss.symmetric`` is refused with it.
    symmetric_ok: bool = True

    #: When True the trainer passes the batch gathered from all ranks (q, k, labels), e.g. for an
    #: OC-SVM that must be fitted on the global batch so that every rank gets the same inlier set.
    needs_global_batch: bool = False

    #: True when the strategy draws across ranks (reads ``s.ctx.rank`` / ``s.ctx.world_size``, or
    #: needs the global batch): the contract kit then checks that 2 gloo ranks see what one process
    #: sees with the global batch (``pretrain.testing.ddp``; two processes, a few seconds).
    ddp_check: ClassVar[bool] = False

    #: True when the strategy's shared negatives take the queue's place (AdCo's learnable bank):
    #: ``config.validate`` then asks for a loss with ``loss.contrast_queue: false``.
    replaces_queue: bool = False

    def setup(self, ctx: SetupContext) -> None:
        """Called once at build time, before a checkpoint is loaded, with the run's
        [`SetupContext`][negmine_core.step.SetupContext]: for strategies that own state of the
        embedding's size (AdCo's bank) or make images of the training size (outlier exposure); a
        no-op by default."""

    def transform_batch(self, batch: Batch, ctx: StepContext = ONE_PROCESS) -> Batch:
        """The batch before the encoders, for the step of ``ctx``: data-level negatives (rotated
        or pasted outliers replace some images and their labels, ``batch.replace(x1=..., x2=...,
        y=...)``); identity by default. A loss has the same hook; the strategy's runs first."""
        return batch

    def negatives(self, s: Step) -> ExtraNegatives:
        """Extra negatives for this step, from the step's [`Step`][negmine_core.step.Step]: the
        batch through ``s.detached()`` (queries without their gradient), ``s.queue``,
        ``s.queue_labels`` and the step's context ``s.ctx``: none by default."""
        return ExtraNegatives()

    def check_sizes(self, queue_size: int, batch_size: int) -> None:
        """Raise ValueError if the strategy cannot work with this queue and global batch.

        The trainer calls it once at setup, so a bad config fails before the first step rather
        than when a warm-up ends.
        """

    def diagnostics(self) -> dict[str, torch.Tensor | float | str]:
        """Statistics of the latest step (scalars, possibly device tensors, or a str label such as
        the OC-SVM loop that ran); read at log steps."""
        return {}

    def bad_input(self) -> str:
        """Why the loss may have become non-finite, named by the trainer's finite check when it
        stops a run (may read the device; never called per step). Empty when nothing to say."""
        return ""
