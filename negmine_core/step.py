"""The records of one training step, in the order the step makes them:

- [`StepContext`][negmine_core.step.StepContext]: where the step is (epoch, global step, rank,
  world size), one per step, read by the strategies and the losses alike;
- [`Batch`][negmine_core.step.Batch]: one batch, in one form from the loader to the loss;
- [`Embeddings`][negmine_core.step.Embeddings]: what the model makes of it
  (``pretrain.model.encoders.MoCo.embed``);
- [`Step`][negmine_core.step.Step]: the one record of the step that a strategy's ``negatives()``
  and a loss's ``forward()`` both receive (the embeddings, what the ranks and the queue add, the
  context, and the strategy's [`ExtraNegatives`][negmine_core.step.ExtraNegatives] once it ran);

and, once per run, [`SetupContext`][negmine_core.step.SetupContext]: what a strategy's or a loss's
setup hook may read.

A leaf module (imports only torch), so the model, the losses and the strategies all read the same
records without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch

from negmine_core.conventions import NO_LABEL


@dataclass(frozen=True, kw_only=True)
class StepContext:
    """Where one training step is; the trainer builds one per step.

    Attributes:
        epoch: fractional epoch of this step (warm-ups, annealed losses).
        global_step: optimizer steps done before this one.
        rank: this process's rank (0 in one process).
        world_size: the number of ranks (1 in one process); a strategy that draws for the global
            batch and keeps its own rows reads (rank, world_size) here.
    """

    epoch: float = 0.0
    global_step: int = 0
    rank: int = 0
    world_size: int = 1


#: The context of a step in one process (rank 0 of 1, epoch 0): the default outside the trainer.
ONE_PROCESS = StepContext()


@dataclass(frozen=True, kw_only=True)
class Batch:
    """One training batch, as the loaders give it
    ([`from_loader`][negmine_core.step.Batch.from_loader]), on its way to the loss.

    The step replaces fields (`replace`: the device's photometric ops, a strategy's
    data-level negatives, a loss's input mixing), never the form.
    """

    x1: torch.Tensor  # (N, 3, S, S) view 1: uint8 crops when params is set, else normalised
    x2: torch.Tensor  # (N, 3, S, S) view 2, likewise
    y: torch.Tensor  # (N,) labels (negatives.base conventions)
    params: torch.Tensor | None = None  # (N, 2 + V, P) stage-2 rows (data.augment_on: device)
    support: torch.Tensor | None = None  # (N, V, 3, S, S) support crops (FNC); (N * V, 3, S, S)
    # normalised once the device's photometric ops ran

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
        params = rows[0] if rows else None
        support = rows[1] if len(rows) > 1 else None
        return cls(x1=x1, x2=x2, y=y, params=params, support=support)

    def tensors(self) -> list[torch.Tensor]:
        """The batch's tensors, in field order (the ones that are set)."""
        return [t for t in (getattr(self, f.name) for f in fields(self)) if t is not None]

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Batch:
        """The batch with ``fn`` applied to every tensor that is set."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return Batch(**{name: None if t is None else fn(t) for name, t in values.items()})

    def to(self, device: torch.device) -> Batch:
        """On ``device``, non-blocking (the loaders pin their batches)."""
        return self.map(lambda t: t.to(device, non_blocking=True))

    def replace(self, **changes: Any) -> Batch:
        return replace(self, **changes)


def full(x: torch.Tensor | None) -> torch.Tensor | None:
    """``x`` in at least float32 (bf16/fp16 encoder outputs upcast; float64 kept)."""
    if x is None or not x.is_floating_point():
        return x
    return x.to(torch.promote_types(x.dtype, torch.float32))


@dataclass(frozen=True, kw_only=True)
class Embeddings:
    """What the model makes of one batch: unit-norm embeddings, D = the head's output."""

    q: torch.Tensor  # (N, D) queries of view 1, with gradient
    q2: torch.Tensor | None = None  # (N, D) queries of view 2 (loss.symmetric, moco.symmetric_keys)
    k: torch.Tensor  # (N, D) keys of view 2, no gradient
    k1: torch.Tensor | None = None  # (N, D) keys of view 1, q2's positives (moco.symmetric_keys)
    kappa_q: torch.Tensor | None = None  # (N,) concentrations (a kappa head), else None
    kappa_q2: torch.Tensor | None = None
    kappa_k: torch.Tensor | None = None
    support: torch.Tensor | None = None  # (N, V, D) keys of the support views
    features: torch.Tensor | None = None  # (N, F) view 1's backbone features (the online probe)

    def float32(self) -> Embeddings:
        """Every tensor in float32 (the encoders may run under reduced-precision autocast)."""
        return Embeddings(**{f.name: full(getattr(self, f.name)) for f in fields(self)})


@dataclass
class ExtraNegatives:
    """Negatives a strategy adds for one step (unit norm, detached).

    Attributes:
        shared: (M, D) appended after the queue for every query, or None.
        per_query: (N, S, D) private to each query, or None.
    """

    shared: torch.Tensor | None = None
    per_query: torch.Tensor | None = None


def unknown(n: int, device: torch.device) -> torch.Tensor:
    """``n`` labels NO_LABEL (-1): unknown."""
    return torch.full((n,), NO_LABEL, dtype=torch.long, device=device)


@dataclass(frozen=True, kw_only=True)
class Step:
    """One training step as a strategy's ``negatives()`` and a loss's ``forward()`` both see it
    (all on the device), by keyword only, so a new field never breaks an override: the model's
    [`Embeddings`][negmine_core.step.Embeddings] (held, not copied: ``s.emb.q``), what the ranks and
    the queue add, the step's [`StepContext`][negmine_core.step.StepContext] (``s.ctx.epoch``), and
    the strategy's negatives once it ran (``s.extra``; the trainer makes the loss's record with
    ``s.replace(extra=...)``).

    A strategy reads the batch through [`detached`][negmine_core.step.Step.detached]: its queries
    without their gradient, and every rank's rows where it declared ``needs_global_batch``.
    ``Step.single(q, k, queue=...)`` fills in the one-process defaults, so any strategy or loss can
    be tried in two lines::

        step = Step.single(q, k, queue=queue)
        loss = losses.create("supcon", temperature=0.1)(step)
        extra = negatives.create("mochi").negatives(step)
    """

    emb: Embeddings  # q (N, D) with gradient, k (N, D) constants, q2, k1, kappa_*, support
    k_all: torch.Tensor  # (B, D) the keys of every rank in rank order (k in one process)
    labels: torch.Tensor  # (N,) this rank's labels, NO_LABEL (-1) where unknown
    labels_all: torch.Tensor  # (B,) every rank's
    queue: torch.Tensor  # (K, D) before this step's enqueue, read-only
    queue_labels: torch.Tensor  # (K,) the labels beside the queue keys, NO_LABEL where unknown
    ctx: StepContext = ONE_PROCESS  # epoch (warm-ups, annealed losses), global_step, rank, world
    extra: ExtraNegatives = field(default_factory=ExtraNegatives)  # the strategy's, once it ran
    q_all: torch.Tensor | None = None  # (B, D) every rank's queries, detached: gathered by the
    # trainer for a strategy that declares needs_global_batch, else None

    @property
    def offset(self) -> int:
        """Index of this rank's first key in k_all."""
        return self.ctx.rank * self.emb.q.shape[0]

    def detached(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(q, k, labels)`` as a strategy reads them: the queries without their gradient, the
        keys and the labels of the same rows: every rank's (B rows: ``q_all``, ``k_all``,
        ``labels_all``) where the trainer gathered them for a strategy that declares
        ``needs_global_batch``, else this rank's (N rows). The labels are for diagnostics
        (false-negative fractions), never for the negatives."""
        if self.q_all is not None:
            return self.q_all.detach(), self.k_all, self.labels_all
        return self.emb.q.detach(), self.emb.k, self.labels

    def replace(self, **changes: Any) -> Step:
        return replace(self, **changes)

    @classmethod
    def single(
        cls,
        q: torch.Tensor,
        k: torch.Tensor,
        *,
        queue: torch.Tensor,
        labels: torch.Tensor | None = None,
        queue_labels: torch.Tensor | None = None,
        extra: ExtraNegatives | None = None,
        epoch: float = 0.0,
        global_step: int = 0,
        rank: int = 0,
        world_size: int = 1,
        **embeddings: torch.Tensor | None,
    ) -> Step:
        """One process: k_all = k, labels_all = labels; labels default to NO_LABEL (unknown: no
        label-positives), queue labels likewise, no extra negatives; rank 0 of 1 unless said.
        ``embeddings``: kappa_q, kappa_k, q2, k1, kappa_q2, support."""
        n, K = q.shape[0], queue.shape[0]
        labels = unknown(n, q.device) if labels is None else labels
        queue_labels = unknown(K, queue.device) if queue_labels is None else queue_labels
        return cls(
            emb=Embeddings(q=q, k=k, **embeddings),
            k_all=k,
            labels=labels,
            labels_all=labels,
            queue=queue,
            queue_labels=queue_labels,
            extra=extra or ExtraNegatives(),
            ctx=StepContext(epoch=epoch, global_step=global_step, rank=rank, world_size=world_size),
        )


def _no_features() -> tuple[torch.Tensor, torch.Tensor]:
    raise RuntimeError("the training images' features are given to the trainer's setup only")


@dataclass(frozen=True, kw_only=True)
class SetupContext:
    """What a strategy's and a loss's ``setup`` hook read of the run: the trainer calls both
    once, the same way, at build time (the strategy's first), after the model and the data are
    built and before a checkpoint is loaded: state of the embedding's size (AdCo's bank), images
    of the training size (outlier exposure), starting values from the training images (CIDER's
    prototypes). A resumed run then loads the hooks' state from its checkpoint.

    Attributes:
        dim: the embedding size (the projection head's output).
        num_classes: the training set's class count (0 where not known yet).
        image_size: the training views' size.
        mean, std: the normalisation of the training images (per channel).
        device: the training device.
        model: the MoCo module (query and key encoders), on ``device``; None outside the trainer.
        features: the normalised head outputs (n, D) of the training images under the eval
            transform, in eval mode, and their labels (n,), on ``device``; computed when called.
        resuming: True when a checkpoint will restore the state the hooks make (a resumed run):
            make state of the right shape (the checkpoint loads into it), but skip starting
            values that cost a pass over the data (CIDER's class means).
    """

    dim: int
    num_classes: int = 0
    image_size: int = 0
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    device: torch.device = torch.device("cpu")
    model: torch.nn.Module | None = None
    features: Callable[[], tuple[torch.Tensor, torch.Tensor]] = _no_features
    resuming: bool = False
