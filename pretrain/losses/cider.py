"""CIDER's compactness and dispersion losses with the sequential prototype EMA (Ming et al., ICLR
2023).

With class prototypes μ_c (C, D) and the multiview batch z = [view1; view2] (2N, D):

- EMA (Alg. 1, per sample in batch order): μ_{y_j} ← normalize(α·μ_{y_j} + (1−α)·z_j), α the
  weight of the OLD prototype.
- L_dis (eq. 6) = (1/C) Σ_i log[(1/(C−1)) Σ_{j≠i} e^{μ_i·μ_j/τ}] on the updated prototypes (no minus
  sign; 1/(C−1) inside the log), keeping the graph through this step's EMA so that L_dis
  back-propagates into z (the official code writes the live z_j into the buffer in place).
- L_comp (eq. 5) = −(1/2N) Σ_j log softmax_c(z_j·μ_c/τ)[y_j] on the updated prototypes, detached.
- Loss = L_dis + λ_c·L_comp.

Implementation based on [1] (``utils/losses.py`` ``DisLoss`` / ``CompLoss``, ``train_cider.py``).

[0] Ming et al., "How to Exploit Hyperspherical Embeddings for Out-of-Distribution Detection?",
    ICLR 2023, https://arxiv.org/abs/2203.04450
[1] https://github.com/deeplearning-wisc/cider/tree/dce8ad3

``loss.name: cider`` (needs every training image's label; no negative strategy)::

    loss:
      name: cider
      kwargs: {lambda_c: 2.0, alpha: 0.95}   # the CIFAR-10 script's

    crit = losses.create("cider", temperature=0.1, num_classes=10, dim=128)
    crit.init_class_means(z_train, y_train)              # once, before the first step
    loss = crit(losses.Step.single(q, k, queue=queue, labels=y))
"""

from __future__ import annotations

import math
from typing import Annotated, ClassVar

import torch
import torch.nn.functional as F

from pretrain.losses.base import (
    Loss,
    SetupContext,
    Step,
    both_views,
    register,
)
from pretrain.losses.masked import (
    REFERENCE_BASE_TEMPERATURE,
    check_temperature,
    compute_dtype,
    masked_logsumexp,
)
from pretrain.runtime import dist

DIS_BASE_TEMPERATURE = 0.1  # the official DisLoss base_temperature (CompLoss: 0.07)


def _check_inputs(
    z: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor, alpha: float
) -> None:
    if z.dim() != 2 or prototypes.dim() != 2 or z.shape[1] != prototypes.shape[1]:
        raise ValueError(
            f"z must be (2N, D) and prototypes (C, D) with the same D, got {tuple(z.shape)} and "
            f"{tuple(prototypes.shape)}"
        )
    if prototypes.shape[0] < 2:
        raise ValueError(f"CIDER needs at least 2 classes (L_dis), got {prototypes.shape[0]}")
    if labels.shape != (z.shape[0],):
        raise ValueError(
            f"labels must have shape ({z.shape[0]},), one per row of z, got {tuple(labels.shape)}"
        )
    if labels.dtype != torch.long:
        raise ValueError(f"labels must be a long tensor of class indices, got {labels.dtype}")
    if not 0.0 <= alpha <= 1.0:  # the function's domain; CIDER (training) refuses 1
        raise ValueError(f"alpha (weight of the old prototype) must lie in [0, 1], got {alpha}")


def sequential_ema(
    z: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor, alpha: float
) -> torch.Tensor:
    """Prototypes after CIDER's per-sample EMA over the batch in order, differentiable in z.

    Equal to ``for j in range(len(z)): μ[y_j] = normalize(α·μ[y_j] + (1−α)·z_j)``. Samples of
    different classes touch different prototypes, so the loop runs over the position within the
    class instead: iteration t updates, for every class in parallel, that class's t-th sample in
    batch order. The loop length is the largest class count in the batch (one host sync).

    Args:
        z: (2N, D) embeddings (the gradient flows through them).
        labels: (2N,) long class indices in [0, C).
        prototypes: (C, D) unit-norm prototypes before the step (treated as constants).
        alpha: α, weight of the old prototype.

    Returns:
        (C, D) updated prototypes, attached to z's graph.
    """
    num_classes = prototypes.shape[0]
    bad = (labels < 0) | (labels >= num_classes)
    classes = torch.arange(num_classes, device=labels.device)
    onehot = (labels.clamp(0, num_classes - 1)[:, None] == classes).long()  # (2N, C); F.one_hot
    # would check the range with two more host syncs on a CPU (CUDA skips them): checked below
    rank = (onehot.cumsum(dim=0) * onehot).sum(dim=1) - 1  # (2N,) position within its class
    invalid, rounds = torch.stack([bad.any().long(), onehot.sum(dim=0).max()]).tolist()
    if invalid:
        raise ValueError(
            f"labels must lie in [0, {num_classes}) (one prototype per class), got values in "
            f"[{int(labels.min())}, {int(labels.max())}]"
        )
    # index[t, c] = row of z holding class c's t-th sample, or -1
    index = torch.full((rounds, num_classes), -1, dtype=torch.long, device=z.device)
    index[rank, labels] = torch.arange(labels.shape[0], device=z.device)
    mu = prototypes.detach().to(z.dtype)
    for t in range(rounds):
        present = (index[t] >= 0).unsqueeze(1)  # (C, 1)
        z_t = torch.where(present, z[index[t].clamp(min=0)], mu)  # (C, D); absent: μ itself
        mu = torch.where(present, F.normalize(alpha * mu + (1 - alpha) * z_t, dim=1), mu)
    return mu


def cider_terms(
    z: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    alpha: float,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The two CIDER terms and the updated prototypes, for logging.

    Args:
        z: (2N, D) unit-norm embeddings, ``[view1; view2]`` (the EMA order).
        labels: (2N,) long class indices in [0, C).
        prototypes: (C, D) unit-norm class prototypes before this step.
        alpha: α, weight of the old prototype in the EMA (paper: 0.95 CIFAR-10, 0.5 CIFAR-100).
        temperature: τ (paper: 0.1).

    Returns:
        ``(l_dis, l_comp, updated)``: eq. 6 (graph through the EMA into z), eq. 5 (prototypes
        detached; no τ/0.07 factor), and the (C, D) updated prototypes, detached.
    """
    check_temperature(temperature)
    _check_inputs(z, labels, prototypes, alpha)
    z = z.to(compute_dtype(z.dtype))
    mu = sequential_ema(z, labels, prototypes, alpha)  # (C, D)
    num_classes = mu.shape[0]
    proto_logits = torch.einsum("id,jd->ij", mu, mu).to(z.dtype) / temperature  # (C, C)
    others = ~torch.eye(num_classes, dtype=torch.bool, device=z.device)
    lse, _ = masked_logsumexp(proto_logits, others)  # (C,)
    l_dis = (lse - math.log(num_classes - 1)).mean()
    comp_logits = torch.einsum("nd,cd->nc", z, mu.detach()).to(z.dtype) / temperature  # (2N, C)
    log_prob = torch.log_softmax(comp_logits, dim=1)
    l_comp = -log_prob.gather(1, labels.unsqueeze(1)).mean()
    return l_dis, l_comp, mu.detach()


def cider(
    z: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    alpha: float,
    temperature: float,
    lambda_c: float,
    *,
    comp_scale: bool = False,
    dis_scale: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """CIDER loss L_dis + λ_c·L_comp (eqs. 5-6 of [0]) and the EMA-updated prototypes.

    Args:
        z: (2N, D) unit-norm embeddings, ``[view1; view2]`` (the EMA order).
        labels: (2N,) long class indices in [0, C).
        prototypes: (C, D) unit-norm class prototypes before this step.
        alpha: α, weight of the old prototype in the EMA.
        temperature: τ.
        lambda_c: λ_c, weight of L_comp (paper: 2 on CIFAR-10, 1 on CIFAR-100).
        comp_scale: multiply L_comp by τ / 0.07 as the official ``CompLoss`` does (its
            base_temperature stays 0.07). NOTE: the default False is the paper's equation.
        dis_scale: multiply L_dis by τ / 0.1 as the official ``DisLoss`` does (its
            base_temperature stays 0.1: a no-op at the paper's τ = 0.1, not at other τ).

    Returns:
        ``(loss, updated_prototypes)``; the (C, D) prototypes are detached, for the trainer to
        store.
    """
    l_dis, l_comp, updated = cider_terms(z, labels, prototypes, alpha, temperature)
    if comp_scale:
        l_comp = l_comp * (temperature / REFERENCE_BASE_TEMPERATURE)
    if dis_scale:
        l_dis = l_dis * (temperature / DIS_BASE_TEMPERATURE)
    return l_dis + lambda_c * l_comp, updated


@register("cider")
class Cider(Loss):
    """CIDER (Ming et al.): L_dis (eq. 6) + lambda_c * L_comp (eq. 5) with EMA class prototypes.

    The views are ``[q_all; k_all]`` (both views of every image of the global batch, in batch
    order); only this rank's queries carry gradient, so L_dis back-propagates through this step's
    EMA into the query encoder (Ming et al. 2023, CIDER: eq. 6 on the prototypes of the EMA
    update). The prototypes are a buffer (saved in checkpoints,
    identical on every rank), initialised from the class means of the normalised head outputs of
    the training set. CIDER has no instance negatives: the queue is not used, and strategies that
    add negatives or outliers are refused.

    Args:
        num_classes: classes of the training labels (the trainer passes the dataset's count).
        dim: dimension of the prototypes, the projection head's output (``model.dim``).
        lambda_c: weight of L_comp, non-negative (CIDER, CIFAR-10 script: ``--w 2``).
        alpha: prototype EMA, the weight of the old prototype, in [0, 1) (CIFAR-100: 0.5).
        comp_scale: multiply L_comp by T/0.07 as the official code does.
        dis_scale: multiply L_dis by T/0.1 as the official ``DisLoss`` does (T != 0.1 only).
        classes: the trained (in-distribution) classes, at least 2; None or [] = all
            ``num_classes`` (the trainer passes ``data.in_classes``).
    """

    syncs_per_step = 1
    syncs_why = (
        "the per-class prototype EMA loops over the largest class count of the batch: one copy "
        "of (labels valid?, rounds) to the host"
    )

    needs_labels = True
    accepts_strategies = ("none",)
    why_strategies = (
        "CIDER contrasts samples with class prototypes, not with instance negatives, so extra "
        "negatives (MiOC, MoCHi) have no term to enter and synthetic outliers have no prototype"
    )

    from_run: ClassVar[tuple[str, ...]] = ("temperature", "num_classes", "dim", "classes")

    def __init__(
        self,
        temperature: float,
        *,
        num_classes: int,
        dim: int,
        lambda_c: Annotated[float, "must be non-negative"] = 2.0,
        alpha: Annotated[float, "must lie in [0, 1) (the old prototype's weight)"] = 0.95,
        comp_scale: bool = False,
        dis_scale: bool = False,
        classes: list[int] | None = None,
    ) -> None:
        super().__init__(temperature)
        if not 0.0 <= alpha < 1.0:  # 1 is in the function's domain (constant prototypes, as
            # the gradient check uses them) but a run whose prototypes never move is a mistake
            raise ValueError(f"alpha must lie in [0, 1) (the old prototype's weight), got {alpha}")
        if not lambda_c >= 0:
            raise ValueError(f"lambda_c must be non-negative, got {lambda_c}")
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

    def setup(self, ctx: SetupContext) -> None:
        """The prototypes start as the class means of the training images' embeddings (a
        resumed run loads them from its checkpoint instead)."""
        if not ctx.resuming:
            self.init_class_means(*ctx.features())

    @torch.no_grad()
    def init_class_means(self, z: torch.Tensor, labels: torch.Tensor) -> None:
        """Prototypes from normalised features (n, D) and labels (n,) of the training set."""
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

    def forward(self, s: Step) -> torch.Tensor:
        if s.emb.q2 is None:  # [queries; momentum keys]; every rank's queries carry gradient
            q_all = dist.gather_with_grad(s.emb.q)
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
