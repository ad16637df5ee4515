"""What every loss shares: the step record :class:`StepTensors`, the base class :class:`Loss` and
the registry of ``loss.name`` (owned here, in the registry class the strategies use), as lightly
keeps ``lightly.loss``'s base pieces apart from one file per loss.

    from pretrain import losses

    step = losses.StepTensors.single(q, k, queue=queue)
    loss = losses.create("supcon", temperature=0.1)(step)      # any ``loss.name``

A new loss is one file: a ``Loss`` subclass with ``@register("name")``, its paper in the
docstring, and its own settings as keyword arguments of its constructor (the config's
``loss.kwargs``, checked against that signature); the run settings it takes besides (the
temperature, the class count, ...) are named in :attr:`Loss.from_run`, and the trainer reads
them from the config (``pretrain.config.run_settings``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from negatives.base import ExtraNegatives
from negmine_core.contract import Contract
from negmine_core.conventions import NO_LABEL
from negmine_core.registry import Registry
from negmine_core.step import ONE_PROCESS, Batch, Embeddings, SetupContext, StepContext
from pretrain.losses.masked import check_temperature
from pretrain.runtime import dist


@dataclass(kw_only=True)
class StepTensors:
    """What a loss sees of one training step (all on the device), by keyword only: the model's
    :class:`~negmine_core.step.Embeddings` (held, not copied: ``s.q`` is ``s.emb.q``), what the
    ranks and the queue add, and the step's :class:`~negmine_core.step.StepContext`.

    ``StepTensors.single(q, k, queue=...)`` fills in the one-process defaults, so any loss can be
    tried in two lines::

        step = StepTensors.single(q, k, queue=queue)
        loss = losses.create("supcon", temperature=0.1)(step)
    """

    emb: Embeddings  # q (N, D) with gradient, k (N, D) constants, q2, kappa_*, support (N, V, D)
    k_all: torch.Tensor  # (B, D) the keys of every rank in rank order (k in one process)
    labels: torch.Tensor  # (N,) this rank's labels (negatives.base conventions)
    labels_all: torch.Tensor  # (B,)
    queue: torch.Tensor  # (K, D) before this step's enqueue
    queue_labels: torch.Tensor  # (K,)
    extra: ExtraNegatives
    ctx: StepContext = ONE_PROCESS  # epoch (annealed losses: ring, hard), global_step, rank

    q = property(lambda s: s.emb.q, doc="(N, D) this rank's queries, unit norm, with gradient")
    k = property(lambda s: s.emb.k, doc="(N, D) this rank's keys, unit norm, constants")
    k1 = property(lambda s: s.emb.k1, doc="(N, D) moco.symmetric_keys: view 1's keys, or None")
    q2 = property(lambda s: s.emb.q2, doc="(N, D) view 2's queries (symmetric layouts), or None")
    kappa_q = property(lambda s: s.emb.kappa_q, doc="(N,) with a kappa head, else None")
    kappa_k = property(lambda s: s.emb.kappa_k, doc="(N,) with a kappa head, else None")
    kappa_q2 = property(lambda s: s.emb.kappa_q2, doc="(N,) symmetric layout with a kappa head")
    support = property(lambda s: s.emb.support, doc="(N, V, D) support views' keys, or None")
    epoch = property(lambda s: s.ctx.epoch, doc="fractional epoch of this step")
    global_step = property(lambda s: s.ctx.global_step, doc="steps done before this one")

    @property
    def offset(self) -> int:
        """Index of this rank's first key in k_all."""
        return self.ctx.rank * self.q.shape[0]

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
        **embeddings: torch.Tensor | None,
    ) -> StepTensors:
        """One process: k_all = k, labels_all = labels, rank 0; labels default to NO_LABEL
        (unknown: no label-positives), queue labels likewise, no extra negatives.
        ``embeddings``: kappa_q, kappa_k, q2, k1, kappa_q2, support."""
        n, K = q.shape[0], queue.shape[0]
        labels = unknown(n, q.device) if labels is None else labels
        queue_labels = unknown(K, q.device) if queue_labels is None else queue_labels
        return cls(
            emb=Embeddings(q=q, k=k, **embeddings),
            k_all=k,
            labels=labels,
            labels_all=labels,
            queue=queue,
            queue_labels=queue_labels,
            extra=extra or ExtraNegatives(),
            ctx=StepContext(epoch=epoch, global_step=global_step),
        )


def unknown(n: int, device: torch.device) -> torch.Tensor:
    """``n`` labels NO_LABEL (-1): unknown."""
    return torch.full((n,), NO_LABEL, dtype=torch.long, device=device)


def both_views(s: StepTensors) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric layout: the local anchors [q; q2] (2N, D) and every rank's views
    [q_all; q2_all] (2B, D), all with gradient (routed back to the rank that owns them)."""
    if s.q2 is None:
        raise ValueError("the symmetric layout needs the second view's queries (q2)")
    return torch.cat([s.q, s.q2]), torch.cat(
        [dist.gather_with_grad(s.q), dist.gather_with_grad(s.q2)]
    )


def contrast_set(
    s: StepTensors, with_queue: bool = True, batch: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidates [batch; queue; shared] (M, D) and their labels (M,): batch = k_all (detached)
    or, in the symmetric layout, [q_all; q2_all] (live); synthetic points never match a label."""
    if batch is None:
        parts, labels = [s.k_all.detach()], [s.labels_all]
    else:
        parts, labels = [batch], [torch.cat([s.labels_all, s.labels_all])]
    if with_queue:
        parts.append(s.queue)
        labels.append(s.queue_labels)
    if s.extra.shared is not None:
        parts.append(s.extra.shared)
        labels.append(torch.full_like(s.labels_all[:1], NO_LABEL).expand(s.extra.shared.shape[0]))
    parts[1:] = [t.detach().to(parts[0].dtype) for t in parts[1:]]
    return torch.cat(parts), torch.cat(labels)


#: The class attributes a loss declares (:class:`Loss`), which a wrapper declares the same.
DECLARED = (
    "name",
    "accepts_strategies",
    "why_strategies",
    "batch_layout",
    "can_drop_queue",
    "needs_labels",
    "extra_views",
)


class Loss(Contract, nn.Module):
    """Base class. ``forward(step: StepTensors) -> scalar loss``.

    Attributes:
        from_run: the run settings the constructor takes by keyword (``temperature``,
            ``num_classes``, ``dim``, ``classes``, ``epochs``, ``bn_splits``,
            ``contrast_queue``), filled in by the trainer; ``loss.kwargs`` may not set them.
        accepts_strategies: negative strategies this loss can be combined with (None = any).
        batch_layout: can run in the symmetric 2N x 2N layout (``loss.symmetric``).
        can_drop_queue: the batch alone can be the contrast set (``loss.contrast_queue: false``).
        needs_labels: needs a label on every training image (refuses unlabelled splits).
        extra_views: the support views (``data.support_views``) it needs at least; their keys
            come in ``StepTensors.support`` (FNC: 1).

    ``config.validate`` and the builder read these attributes, never a loss's name. What else a
    loss needs happens in its own methods: :meth:`setup` (once, before the first step of a fresh
    run) and :meth:`transform_batch` (each step, before the encoders). The class
    docstring's ``Args:`` section documents every constructor argument (the configuration
    reference is generated from it: ``scripts/gen_config_docs.py``).

    Args:
        temperature: T of the logits, above 1e-3; the trainer passes ``moco.temperature``.
    """

    #: The run settings the constructor takes by keyword, filled in by the trainer (the names
    #: of ``pretrain.config.run_settings.KEYS``, which says where each is read); ``loss.kwargs``
    #: may not set them. The base's: ``temperature`` (``moco.temperature``), checked by
    #: ``Loss.__init__`` (above 1e-3) and kept as ``self.temperature`` (a loss that has no
    #: temperature still takes it, unused).
    from_run: ClassVar[tuple[str, ...]] = ("temperature",)

    # -- The contract: negmine_core.contract.Contract (syncs_per_step, syncs_why, capturable,
    # why_not_capturable, step_state, contract_kwargs), the same as a strategy's.

    #: The negative strategies this loss can be combined with (None: any); the builder refuses
    #: any other (``check_strategy``), naming ``why_strategies``.
    accepts_strategies: tuple[str, ...] | None = None
    #: Why only ``accepts_strategies`` (the refusal's message).
    why_strategies: str = ""
    #: True when the loss can run in the symmetric layout (``loss.symmetric: true``: both views
    #: as queries, 2N x 2N, ``s.q2`` set); ``config.validate`` refuses ``loss.symmetric`` with a
    #: loss that sets False. Set False when ``forward`` reads MoCo's layout only (queries
    #: against their keys and the queue, as ``moco_logits`` does) and never ``s.q2``.
    batch_layout: bool = True
    #: True when the batch alone can be the contrast set (``loss.contrast_queue: false``, which
    #: ``config.validate`` refuses otherwise; a strategy that replaces the queue needs it).
    can_drop_queue: bool = False
    #: True when the loss needs a label on every training image: ``config.validate`` refuses
    #: unlabelled splits with it.
    needs_labels: bool = False
    #: The support views (``data.support_views``) the loss needs at least; their keys come in
    #: ``StepTensors.support`` (FNC: 1). ``config.validate`` refuses fewer.
    extra_views: int = 0

    def __init__(self, temperature: float) -> None:
        super().__init__()
        check_temperature(temperature)
        self.temperature = temperature

    def forward(self, s: StepTensors) -> torch.Tensor:
        """The step's loss, a scalar with a gradient into ``s.q`` (and ``s.q2``), none into the
        queue; it must use the strategy's negatives, ``s.extra.shared`` (M, D) for every query
        and ``s.extra.per_query`` (N, S, D) for each (``moco_logits`` and ``contrast_set`` do):
        the contract kit fails a loss that ignores them. Every loss overrides it."""
        raise NotImplementedError(f"{type(self).__qualname__} does not define forward()")

    @classmethod
    def check_strategy(cls, name: str) -> None:
        """ValueError if this loss cannot be combined with negative strategy ``name``: a class
        declaration, checked before any data is read."""
        if cls.accepts_strategies is not None and name not in cls.accepts_strategies:
            raise ValueError(
                f"loss {cls.name!r} cannot be combined with negative strategy {name!r}: "
                f"{cls.why_strategies} (allowed: {', '.join(cls.accepts_strategies)})"
            )

    def setup(self, ctx: SetupContext) -> None:
        """Called once before the first step of a fresh run (a resumed run restores the state
        from its checkpoint instead); a no-op by default. CIDER starts its prototypes here."""

    def transform_batch(self, batch: Batch) -> Batch:
        """The batch before the encoders: identity, except for losses that change the input
        (i-Mix mixes the query images and keeps the mixing for its targets)."""
        return batch

    def diagnostics(self) -> dict[str, torch.Tensor | float]:
        """Statistics of the latest step, read at log steps only (device tensors, no sync)."""
        return {}

    def histograms(self) -> dict[str, torch.Tensor]:
        """Per-sample values of the latest step for TensorBoard histograms (log steps only)."""
        return {}

    #: The YAML name (``loss.name``), set by ``register`` (an entry point's name for a plugin).
    name = "loss"


#: The losses (``loss.name``), owned by ``pretrain.losses``, in the registry class the negative
#: strategies use.
#: Installed packages add their own through the entry point group ``negmine.losses``. A kwarg
#: left null in ``loss.kwargs`` takes the loss's default, as in ``negatives.kwargs``.
registry: Registry[Loss] = Registry("loss", drop_none=True, group="negmine.losses")
register = registry.register


def list_losses() -> list[str]:
    return registry.names()


def create(name: str, **kwargs: Any) -> Loss:
    """Build loss ``name``; an unknown name or kwarg is a ValueError with a suggestion."""
    return registry.create(name, **kwargs)
