"""The losses the trainer calls, keyed by the YAML name ``loss.name``.

    loss_fn = losses.create("supcon", temperature=0.1)
    loss = loss_fn(step)  # step: a StepTensors of one training step

Each loss is a thin module around a pure function of :mod:`pretrain.losses`, in MoCo's layout:
the anchors are this rank's queries q (with gradient); the contrast set is the keys of the whole
(gathered) batch, then the queue, then the strategy's shared negatives (all constants), plus the
strategy's per-query negatives. So the labelled losses contrast against the other batch keys
as well as the queue, as SupCon contrasts against the whole batch; MoCo's ``infonce`` keeps its
own layout (own key + queue + extras). The papers' 2N x 2N multiview forms of the same losses are
the functions in :mod:`pretrain.losses` (``nt_xent``, ``supcon``, ``sincere``, ``firm``, ``cider``).

With ``loss.symmetric`` the trainer also passes the second view through the query encoder
(``StepTensors.q2``) and the batch losses use the papers' layout: every row of [q; q2] is an
anchor against every other view of the gathered batch (+ the queue unless ``contrast_queue`` is
off), its other view the pair positive; CIDER's views are then [q; q2] and the kappa terms use
(q, kappa_q) and (q2, kappa_q2), as in the papers.

A kappa head (``model.kappa_hidden`` > 0) adds seed 004's L_align + L_reg to any loss
(:class:`WithKappa`): in MoCo's layout (q, kappa_q) from the query encoder and (k, kappa_k) from
the momentum encoder, so only the query side carries gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from negatives.base import NO_LABEL, ExtraNegatives
from negatives.registry import Registry
from pretrain.losses.cider import cider
from pretrain.losses.infonce import info_nce, moco_logits
from pretrain.losses.kappa import kappa_alignment
from pretrain.losses.masked import check_temperature
from pretrain.losses.queue_layout import contrast_top1, queue_contrastive
from pretrain.losses.reweighted import moco_diagnostics
from pretrain.runtime import dist


@dataclass(kw_only=True)
class StepTensors:
    """What an loss sees of one training step (all on the device), by keyword only.

    ``StepTensors.single(q, k, queue=...)`` fills in the one-process defaults, so any loss can be
    tried in two lines::

        step = StepTensors.single(q, k, queue=queue)
        loss = losses.create("supcon", temperature=0.1)(step)
    """

    q: torch.Tensor  # (N, D) this rank's queries, unit norm, with gradient
    k: torch.Tensor  # (N, D) this rank's keys, unit norm, constants
    k_all: torch.Tensor  # (B, D) the keys of every rank in rank order (k in one process)
    labels: torch.Tensor  # (N,) this rank's labels (negatives.base conventions)
    labels_all: torch.Tensor  # (B,)
    offset: int  # index of this rank's first key in k_all
    queue: torch.Tensor  # (K, D) before this step's enqueue
    queue_labels: torch.Tensor  # (K,)
    extra: ExtraNegatives
    kappa_q: torch.Tensor | None = None  # (N,) with gradient, when the model has a kappa head
    kappa_k: torch.Tensor | None = None  # (N,)
    q2: torch.Tensor | None = None  # (N, D) symmetric layout: view 2 through the query encoder
    kappa_q2: torch.Tensor | None = None  # (N,)
    support: torch.Tensor | None = None  # (N, V, D) support views' keys (data.support_views)
    epoch: float = 0.0  # fractional epoch of this step (annealed losses: ring, hard)
    global_step: int = 0  # steps done before this one

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
        **optional: Any,
    ) -> StepTensors:
        """One process: k_all = k, labels_all = labels, offset 0; labels default to NO_LABEL
        (unknown: no label-positives), queue labels likewise, no extra negatives. ``optional``:
        kappa_q, kappa_k, q2, kappa_q2, epoch, global_step."""
        n, K = q.shape[0], queue.shape[0]
        unknown = lambda m: torch.full((m,), NO_LABEL, dtype=torch.long, device=q.device)  # noqa: E731
        labels = unknown(n) if labels is None else labels
        return cls(q=q, k=k, k_all=k, labels=labels, labels_all=labels, offset=0, queue=queue,
                   queue_labels=unknown(K) if queue_labels is None else queue_labels,
                   extra=extra or ExtraNegatives(), **optional)  # fmt: skip


def both_views(s: StepTensors) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric layout: the local anchors [q; q2] (2N, D) and every rank's views
    [q_all; q2_all] (2B, D), all with gradient (routed back to the rank that owns them)."""
    if s.q2 is None:
        raise ValueError("the symmetric layout needs the second view's queries (q2)")
    return torch.cat([s.q, s.q2]), torch.cat(
        [dist.gather_with_grad(s.q), dist.gather_with_grad(s.q2)]
    )


class Loss(nn.Module):
    """Base class. ``forward(step) -> scalar loss``.

    Attributes:
        temperature: T of the logits (``moco.temperature``).
        needs_class_means: the trainer calls :meth:`init_class_means` once, before the first step
            of a fresh run, with the normalised head outputs of the training images (CIDER).
        accepts_strategies: negative strategies this loss can be combined with (None = any).
        batch_layout: can run in the symmetric 2N x 2N layout (``loss.symmetric``).
        can_drop_queue: the batch alone can be the contrast set (``loss.contrast_queue: false``).
        needs_labels: needs a label on every training image (refuses unlabelled splits).

    A new loss is one file: a registered subclass whose :meth:`config_kwargs` reads its settings
    from the config; ``config.validate`` and the builder read these attributes, never its name.
    Its class docstring's ``Args:`` section documents every constructor argument (the
    configuration reference is generated from it: ``scripts/gen_config_docs.py``).

    Args:
        temperature: T of the logits, above 1e-3; the trainer passes ``moco.temperature``.
    """

    needs_class_means: bool = False
    accepts_strategies: tuple[str, ...] | None = None
    why_strategies: str = ""
    batch_layout: bool = True
    can_drop_queue: bool = False
    needs_labels: bool = False
    needs_support: bool = False  # needs data.support_views (FNC)

    @classmethod
    def config_kwargs(cls, cfg: Any, num_classes: int) -> dict[str, Any]:
        """Constructor kwargs from the resolved config (``pretrain.config.Config``)."""
        return {"temperature": cfg.moco.temperature}

    def __init__(self, temperature: float) -> None:
        super().__init__()
        check_temperature(temperature)
        self.temperature = temperature

    def check_strategy(self, name: str) -> None:
        """ValueError if this loss cannot be combined with negative strategy ``name``."""
        if self.accepts_strategies is not None and name not in self.accepts_strategies:
            raise ValueError(
                f"loss {self.name!r} cannot be combined with negative strategy {name!r}: "
                f"{self.why_strategies} (allowed: {', '.join(self.accepts_strategies)})"
            )

    def init_class_means(self, z: torch.Tensor, labels: torch.Tensor) -> None:
        """Initialise state from features (n, D) and labels (n,) of the training set."""

    def transform_queries(self, x1: torch.Tensor) -> torch.Tensor:
        """The query images (N, C, H, W) before the query encoder: identity, except for losses
        that change the input (i-Mix mixes it and keeps the mixing for its targets)."""
        return x1

    def diagnostics(self) -> dict[str, torch.Tensor | float]:
        """Statistics of the latest step, read at log steps only (device tensors, no sync)."""
        return {}

    def histograms(self) -> dict[str, torch.Tensor]:
        """Per-sample values of the latest step for TensorBoard histograms (log steps only)."""
        return {}

    name = "loss"


#: The losses (``loss.name``), in the registry class the negative strategies use.
registry: Registry[Loss] = Registry("loss")
register = registry.register


def list_losses() -> list[str]:
    return registry.names()


def create(name: str, **kwargs: Any) -> Loss:
    """Build loss ``name``; an unknown name or kwarg is a ValueError with a suggestion."""
    return registry.create(name, **kwargs)


@register("infonce")
class InfoNCE(Loss):
    """MoCo's InfoNCE (He et al. 2020, eq. 1): own key vs the queue and the strategy's extras."""

    batch_layout = False  # MoCo's own asymmetric layout

    def forward(self, s: StepTensors) -> torch.Tensor:
        logits = moco_logits(s.q, s.k, s.queue, self.temperature, s.extra.shared, s.extra.per_query)
        # for the diagnostics on log steps only; the queue labels copied (the enqueue rewrites them)
        self._seen = (logits.detach(), s.labels, s.queue_labels.clone())
        return info_nce(logits)

    def diagnostics(self) -> dict[str, torch.Tensor | float]:
        """``contrast_top1``: MoCo's acc@1 (%), the own key ranked first among own + queue +
        extras (``main_moco.py`` logs it as Acc@1); ``effective_negatives`` (the contrast set's
        size) and ``false_negative_fraction`` (the queue keys with the query's label; synthetic
        extras count as negatives of no class), as every negative baseline logs them."""
        seen = getattr(self, "_seen", None)
        if seen is None:
            return {}
        return moco_diagnostics(*seen)


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


class QueueContrastive(Loss):
    """NT-Xent / SupCon / SINCERE / FIRM in MoCo's layout (see the module docstring), or with
    ``StepTensors.q2`` the papers' symmetric 2N x 2N layout (+ the queue unless
    ``contrast_queue`` is False).

    Args:
        reference_scale: multiply the loss by T/0.07, as HobbitLong/SupContrast's code does
            (supcon only; the trainer passes ``loss.supcon_reference_scale``).
        contrast_queue: False: the batch alone is the contrast set (no queue).
    """

    kind = ""
    can_drop_queue = True

    @classmethod
    def config_kwargs(cls, cfg: Any, num_classes: int) -> dict[str, Any]:
        loss = cfg.loss
        return {
            "temperature": cfg.moco.temperature,
            "reference_scale": loss.supcon_reference_scale and cls.kind == "supcon",
            "contrast_queue": loss.contrast_queue,
        }

    def __init__(
        self, temperature: float, reference_scale: bool = False, contrast_queue: bool = True
    ) -> None:
        super().__init__(temperature)
        self.reference_scale, self.contrast_queue = reference_scale, contrast_queue

    def forward(self, s: StepTensors) -> torch.Tensor:
        n, b = s.q.shape[0], s.k_all.shape[0]
        local = s.offset + torch.arange(n, device=s.q.device)
        if s.q2 is None:  # MoCo layout: queries against keys
            candidates, cand_labels = contrast_set(s, self.contrast_queue)
            anchors, anchor_labels, own, exclude = s.q, s.labels, local, None
            detach = True
        else:  # symmetric: row i of [q; q2] against every other view, its partner positive
            anchors, views = both_views(s)
            candidates, cand_labels = contrast_set(s, self.contrast_queue, views)
            anchor_labels = torch.cat([s.labels, s.labels])
            own, exclude = torch.cat([local + b, local]), torch.cat([local, local + b])
            detach = False
        self._seen = (
            anchors.detach(),
            candidates.detach(),
            anchor_labels,
            cand_labels,
            own,
            s.extra.per_query,
            exclude,
        )  # fmt: skip  (for contrast_top1 on log steps; no copy)
        return queue_contrastive(
            anchors,
            candidates,
            anchor_labels,
            cand_labels,
            own,
            self.temperature,
            self.kind,
            s.extra.per_query,
            reference_scale=self.reference_scale,
            exclude=exclude,
            detach_candidates=detach,
        )

    def diagnostics(self) -> dict[str, torch.Tensor | float]:
        """``contrast_top1``: % of anchors whose nearest candidate is one of their positives."""
        seen = getattr(self, "_seen", None)
        if seen is None:
            return {}
        a, c, al, cl, own, private, exclude = seen
        top1 = contrast_top1(a, c, al, cl, own, self.kind, private, exclude)
        return {"contrast_top1": top1}


@register("nt_xent")
class NTXent(QueueContrastive):
    """NT-Xent (SimCLR; seed 000 eq. 1): the own key is the only positive."""

    kind = "nt_xent"


@register("supcon")
class SupCon(QueueContrastive):
    """SupCon "out" (Khosla et al. 2020, eq. 2): every same-label key is a positive and stays in
    the denominator. ``reference_scale`` multiplies by T/0.07 as HobbitLong/SupContrast does."""

    kind = "supcon"


@register("sincere")
class Sincere(QueueContrastive):
    """SINCERE (seed 002, eq. 12): each positive's denominator holds itself and other-class keys
    only, so same-class keys are never pushed apart."""

    kind = "sincere"


@register("firm")
class Firm(QueueContrastive):
    """FIRM (seed 000, eq. 2): in-distribution anchors (label >= 0) take every in-distribution
    key as positive, synthetic outliers (label <= -2) and unlabelled images only their own key.

    Symmetric without the queue is eq. 2 exactly; MoCo's layout without the queue is the authors'
    training default (their ``FIRMLoss``, view-1 anchors against the N view-2 keys only).
    """

    kind = "firm"


@register("cider")
class Cider(Loss):
    """CIDER (seed 003): L_dis (eq. 6) + lambda_c * L_comp (eq. 5) with EMA class prototypes.

    The views are ``[q_all; k_all]`` (both views of every image of the global batch, in batch
    order); only this rank's queries carry gradient, so L_dis back-propagates through this step's
    EMA into the query encoder (SEMANTICS §6). The prototypes are a buffer (saved in checkpoints,
    identical on every rank), initialised from the class means of the normalised head outputs of
    the training set. CIDER has no instance negatives: the queue is not used, and strategies that
    add negatives or outliers are refused.

    Args:
        num_classes: classes of the training labels (the trainer passes the dataset's count).
        dim: dimension of the prototypes, the projection head's output (``model.dim``).
        lambda_c: weight of L_comp (seed 003, CIFAR-10 script: ``--w 2``).
        alpha: prototype EMA, the weight of the old prototype, in [0, 1) (CIFAR-100: 0.5).
        comp_scale: multiply L_comp by T/0.07 as the official code does.
        dis_scale: multiply L_dis by T/0.1 as the official ``DisLoss`` does (T != 0.1 only).
        classes: the trained (in-distribution) classes, at least 2; None or [] = all
            ``num_classes``.
    """

    needs_class_means = True
    needs_labels = True
    accepts_strategies = ("none",)
    why_strategies = (
        "CIDER contrasts samples with class prototypes, not with instance negatives, so extra "
        "negatives (MiOC, MoCHi) have no term to enter and synthetic outliers have no prototype"
    )

    @classmethod
    def config_kwargs(cls, cfg: Any, num_classes: int) -> dict[str, Any]:
        loss = cfg.loss
        return {
            "temperature": cfg.moco.temperature,
            "num_classes": num_classes,
            "dim": cfg.model.dim,
            "lambda_c": loss.cider_lambda_c,
            "alpha": loss.cider_alpha,
            "comp_scale": loss.cider_comp_scale,
            "dis_scale": loss.cider_dis_scale,
            "classes": list(cfg.data.in_classes),
        }

    def __init__(
        self,
        temperature: float,
        *,
        num_classes: int,
        dim: int,
        lambda_c: float = 2.0,
        alpha: float = 0.95,
        comp_scale: bool = False,
        dis_scale: bool = False,
        classes: list[int] | None = None,
    ) -> None:
        super().__init__(temperature)
        classes = list(range(num_classes)) if not classes else sorted(classes)
        if len(classes) < 2:
            raise ValueError(f"CIDER needs at least 2 classes, got {classes}")
        self.lambda_c, self.alpha, self.comp_scale = lambda_c, alpha, comp_scale
        self.dis_scale = dis_scale
        self.classes = classes
        # one prototype per trained class; dataset label -> prototype row (-1: not trained)
        index = torch.full((max(num_classes, max(classes) + 1),), -1, dtype=torch.long)
        index[torch.tensor(classes)] = torch.arange(len(classes))
        self.register_buffer("class_index", index, persistent=False)
        self.register_buffer("prototypes", torch.zeros(len(classes), dim))

    @torch.no_grad()
    def init_class_means(self, z: torch.Tensor, labels: torch.Tensor) -> None:
        c, d = self.prototypes.shape
        labels = self.class_index[labels.clamp(min=0)].where(labels >= 0, -1)
        keep = labels >= 0
        sums = torch.zeros(c, d, dtype=z.dtype, device=z.device).index_add_(
            0, labels[keep], z[keep]
        )
        empty = (torch.bincount(labels[keep], minlength=c) == 0).nonzero().flatten().tolist()
        missing = [self.classes[i] for i in empty]
        if missing:
            raise ValueError(f"CIDER: classes {missing} have no training image to start from")
        self.prototypes.copy_(torch.nn.functional.normalize(sums, dim=1))

    def forward(self, s: StepTensors) -> torch.Tensor:
        if s.q2 is None:  # [queries; momentum keys]; every rank's queries carry gradient
            q_all = dist.gather_with_grad(s.q)
            z = torch.cat([q_all, s.k_all.to(q_all.dtype)])
        else:  # symmetric: both views live, as in the paper
            z = both_views(s)[1]
        labels = self.class_index[torch.cat([s.labels_all, s.labels_all])]
        loss, updated = cider(
            z,
            labels,
            self.prototypes,
            self.alpha,
            self.temperature,
            self.lambda_c,
            comp_scale=self.comp_scale,
            dis_scale=self.dis_scale,
        )
        self.prototypes.copy_(updated.detach())
        return loss


class WithKappa(Loss):
    """Any loss + seed 004's L_align (eq. 10) + L_reg (eq. 11) on the kappa head."""

    def __init__(self, base: Loss, lambda_align: float, lambda_reg: float) -> None:
        super().__init__(base.temperature)
        self.base, self.lambda_align, self.lambda_reg = base, lambda_align, lambda_reg
        self.needs_class_means = base.needs_class_means
        self.accepts_strategies, self.why_strategies = base.accepts_strategies, base.why_strategies
        self.name = base.name
        self._kappa: torch.Tensor | None = None
        self._terms: dict[str, torch.Tensor] = {}

    def init_class_means(self, z: torch.Tensor, labels: torch.Tensor) -> None:
        self.base.init_class_means(z, labels)

    def transform_queries(self, x1: torch.Tensor) -> torch.Tensor:
        return self.base.transform_queries(x1)

    def forward(self, s: StepTensors) -> torch.Tensor:
        if s.kappa_q is None or s.kappa_k is None:
            raise ValueError("the kappa loss needs a model with a kappa head")
        base = self.base(s)
        if s.q2 is not None:  # symmetric: both views from the query encoder, as in the paper
            mu2, kappa2 = s.q2, s.kappa_q2
        else:
            mu2, kappa2 = s.k.to(s.q.dtype), s.kappa_k
        kappa = kappa_alignment(s.q, s.kappa_q, mu2, kappa2, self.lambda_align, self.lambda_reg)
        self._kappa = s.kappa_q.detach()
        self._terms = {"base": base.detach(), "kappa_terms": kappa.detach()}
        return base + kappa

    def diagnostics(self) -> dict[str, torch.Tensor | float]:
        out = dict(self.base.diagnostics())
        out.update(self._terms)
        if self._kappa is not None:
            out["kappa_mean"] = self._kappa.float().mean()
            out["kappa_std"] = self._kappa.float().std() if self._kappa.numel() > 1 else 0.0
        return out

    def histograms(self) -> dict[str, torch.Tensor]:
        return {} if self._kappa is None else {"kappa": self._kappa}
