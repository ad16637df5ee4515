"""What every loss shares: the base class :class:`Loss`, helpers on the step's record
(:class:`~negmine_core.step.Step`, the one a strategy gets too) and the registry of
``loss.name`` (owned here, in the registry class the strategies use), as lightly keeps
``lightly.loss``'s base pieces apart from one file per loss.

    from pretrain import losses

    step = losses.Step.single(q, k, queue=queue)
    loss = losses.create("supcon", temperature=0.1)(step)      # any ``loss.name``

A new loss is one file: a ``Loss`` subclass with ``@register("name")``, its paper in the
docstring, and its own settings as keyword arguments of its constructor (the config's
``loss.kwargs``, checked against that signature); the run settings it takes besides (the
temperature, the class count, ...) are named in :attr:`Loss.from_run`, and the trainer reads
them from the config (``pretrain.config.run_settings``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from negmine_core.contract import FLAGS, Contract
from negmine_core.conventions import NO_LABEL
from negmine_core.registry import Registry
from negmine_core.step import ONE_PROCESS, Batch, SetupContext, Step, StepContext
from pretrain.losses.masked import check_temperature
from pretrain.runtime import dist


def both_views(s: Step) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric layout: the local anchors [q; q2] (2N, D) and every rank's views
    [q_all; q2_all] (2B, D), all with gradient (routed back to the rank that owns them)."""
    if s.emb.q2 is None:
        raise ValueError("the symmetric layout needs the second view's queries (q2)")
    return torch.cat([s.emb.q, s.emb.q2]), torch.cat(
        [dist.gather_with_grad(s.emb.q), dist.gather_with_grad(s.emb.q2)]
    )


def contrast_set(
    s: Step, with_queue: bool = True, batch: torch.Tensor | None = None
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
DECLARED = ("name", *(flag.attribute for flag in FLAGS if flag.kind == "loss"))


class Loss(Contract, nn.Module):
    """Base class. ``forward(step: Step) -> scalar loss``.

    Attributes:
        from_run: the run settings the constructor takes by keyword (``temperature``,
            ``num_classes``, ``dim``, ``classes``, ``epochs``, ``bn_splits``,
            ``contrast_queue``), filled in by the trainer; ``loss.kwargs`` may not set them.
        accepts_strategies: negative strategies this loss can be combined with (None = any).
        batch_layout: can run in the symmetric 2N x 2N layout (``loss.symmetric``).
        can_drop_queue: the batch alone can be the contrast set (``loss.contrast_queue: false``).
        needs_labels: needs a label on every training image (refuses unlabelled splits).
        extra_views: the support views (``data.support_views``) it needs at least; their keys
            come in ``s.emb.support`` (FNC: 1).

    ``config.validate`` and the builder read these attributes, never a loss's name. What else a
    loss needs happens in its own methods: [`setup`][pretrain.losses.Loss.setup] (once, before the
    first step of a fresh run) and [`transform_batch`][pretrain.losses.Loss.transform_batch] (each
    step, before the encoders). The class docstring's ``Args:`` section documents every constructor
    argument (the configuration reference is generated from it: ``scripts/gen_config_docs.py``).

    Args:
        temperature: T of the logits, above 1e-3; the trainer passes ``moco.temperature``.
    """

    #: The run settings the constructor takes by keyword, filled in by the trainer (the names
    #: of ``pretrain.config.run_settings.KEYS``, which says where each is read); ``loss.kwargs``
    #: may not set them. The base's: ``temperature`` (``moco.temperature``), checked by
    #: ``Loss.__init__`` (above 1e-3) and kept as ``self.temperature``; a loss that uses no
    #: temperature leaves it out of its constructor, and the trainer passes it none.
    from_run: ClassVar[tuple[str, ...]] = ("temperature",)

    # -- The contract: negmine_core.contract.Contract (syncs_per_step, syncs_why, capturable,
    # why_not_capturable, step_state, contract_kwargs), the same as a strategy's.

    #: The negative strategies this loss can be combined with (None: any); the builder refuses
    #: any other (``check_strategy``), naming ``why_strategies``.
    accepts_strategies: tuple[str, ...] | None = None
    #: Why only ``accepts_strategies`` (the refusal's message).
    why_strategies: str = ""
    #: True when the loss can run in the symmetric layout (``loss.symmetric: true``: both views
    #: as queries, 2N x 2N, ``s.emb.q2`` set); ``config.validate`` refuses ``loss.symmetric`` with a
    #: loss that sets False. Set False when ``forward`` reads MoCo's layout only (queries
    #: against their keys and the queue, as ``moco_logits`` does) and never ``s.emb.q2``.
    batch_layout: bool = True
    #: True when the batch alone can be the contrast set (``loss.contrast_queue: false``, which
    #: ``config.validate`` refuses otherwise; a strategy that replaces the queue needs it).
    can_drop_queue: bool = False
    #: True when the loss needs a label on every training image: ``config.validate`` refuses
    #: unlabelled splits with it.
    needs_labels: bool = False
    #: The support views (``data.support_views``) the loss needs at least; their keys come in
    #: ``s.emb.support`` (FNC: 1). ``config.validate`` refuses fewer.
    extra_views: int = 0

    def __init__(self, temperature: float | None = None) -> None:
        super().__init__()
        if temperature is not None:  # None: a loss that uses no temperature
            check_temperature(temperature)
        self.temperature = temperature

    def forward(self, s: Step) -> torch.Tensor:
        """The step's loss, a scalar with a gradient into ``s.emb.q`` (and ``s.emb.q2``), none
        into the queue; it must use the strategy's negatives, ``s.extra.shared`` (M, D) for every
        query and ``s.extra.per_query`` (N, S, D) for each (``moco_logits`` and ``contrast_set``
        do): the contract kit fails a loss that ignores them. Every loss overrides it."""
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

    def transform_batch(self, batch: Batch, ctx: StepContext = ONE_PROCESS) -> Batch:
        """The batch before the encoders, for the step of ``ctx``, after the strategy's own
        ``transform_batch``: identity, except for losses that change the input (i-Mix mixes the
        query images and keeps the mixing for its targets)."""
        return batch

    def diagnostics(self) -> dict[str, torch.Tensor | float]:
        """Statistics of the latest step, read at log steps only (device tensors, no sync)."""
        return {}

    def histograms(self) -> dict[str, torch.Tensor]:
        """Per-sample values of the latest step for TensorBoard histograms (log steps only)."""
        return {}

    #: The YAML name (``loss.name``), set by ``register`` (an entry point's name for a plugin).
    name = "loss"
    #: The contract's kind of class (``negmine_core.contract.Contract.kind``).
    kind = "loss"


#: The losses (``loss.name``), owned by ``pretrain.losses``, in the registry class the negative
#: strategies use.
#: Installed packages add their own through the entry point group ``negmine.losses``. A kwarg
#: left null in ``loss.kwargs`` takes the loss's default, as in ``negatives.kwargs``.
registry: Registry[Loss] = Registry("loss", drop_none=True, group="negmine.losses")
register = registry.register
Loss.registry = registry  # the contract's: the registry of this kind (made after the class)


def list_losses() -> list[str]:
    return registry.names()


def create(name: str, **kwargs: Any) -> Loss:
    """Build loss ``name``; an unknown name or kwarg is a ValueError with a suggestion."""
    return registry.create(name, **kwargs)
