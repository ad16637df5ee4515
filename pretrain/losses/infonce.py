"""``loss.name: infonce``: MoCo's InfoNCE (He et al. 2020, "Momentum Contrast for Unsupervised
Visual Representation Learning", https://arxiv.org/abs/1911.05722, eq. 1; code
facebookresearch/moco ``main_moco.py``): the pure functions and the registered loss.

    from pretrain import losses

    logits = losses.moco_logits(q, k, queue, 0.2)        # (N, 1 + K), positive in column 0
    loss = losses.create("infonce", temperature=0.2)(losses.Step.single(q, k, queue=queue))
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from negmine_core.step import Step
from pretrain.losses.base import Loss, register
from pretrain.losses.reweighted import moco_diagnostics


def moco_logits(
    q: torch.Tensor,
    k: torch.Tensor,
    queue: torch.Tensor,
    temperature: float,
    shared: torch.Tensor | None = None,
    per_query: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logits of MoCo's InfoNCE (Eq. 1 of He et al. 2020), positive in column 0.

    ``[q·k⁺, q·queue, q·shared, q·per_query] / T``.

    Args:
        q: queries (N, D), unit norm.
        k: positive keys (N, D), unit norm.
        queue: negatives shared by every query (K, D), treated as constants.
        temperature: T.
        shared: extra negatives appended for every query (M, D), or None.
        per_query: extra negatives private to each query (N, S, D), or None.

    Returns:
        (N, 1 + K + M + S) logits.
    """
    parts = [
        torch.einsum("nd,nd->n", q, k).unsqueeze(1),  # l_pos: (N, 1)
        torch.einsum("nd,kd->nk", q, queue.detach()),  # l_neg: (N, K)
    ]
    if shared is not None:
        parts.append(torch.einsum("nd,md->nm", q, shared.detach()))  # (N, M)
    if per_query is not None:
        parts.append(torch.einsum("nd,nsd->ns", q, per_query.detach()))  # (N, S)
    return torch.cat(parts, dim=1) / temperature


def info_nce(logits: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy with the positive at index 0: −log softmax(logits)[:, 0]."""
    target = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
    # bf16/fp16 logits are upcast; float64 stays float64 (exact tests, gradcheck)
    return F.cross_entropy(logits.to(torch.promote_types(logits.dtype, torch.float32)), target)


@register("infonce")
class InfoNCE(Loss):
    """MoCo's InfoNCE (He et al. 2020, eq. 1): own key vs the queue and the strategy's extras.

    With view 1's keys in the step (``s.emb.k1``: ``moco.symmetric_keys``) it is the MoCo CIFAR-10
    demo's symmetric loss (facebookresearch/moco, branch colab-notebook,
    ``colab/moco_cifar10_demo.ipynb`` at f736491, ``ModelMoCo.forward``): ``loss_12 + loss_21``,
    the sum of the two directions' means, InfoNCE(q1, k2) + InfoNCE(q2, k1), both against the
    queue before this step's enqueue; no strategy's negatives (they are view 1's queries').
    """

    capturable = True
    # compared captured with eager on a GPU: cifar10_moco (with strategy none) on an H200,
    # 2026-11-28 at d66eca4 and bf56f2b, the GPU suite's graphs part (benchmarks/RESULTS.md)
    capture_verified = True

    batch_layout = False  # MoCo's own asymmetric layout

    def forward(self, s: Step) -> torch.Tensor:
        logits = moco_logits(
            s.emb.q, s.emb.k, s.queue, self.temperature, s.extra.shared, s.extra.per_query
        )
        labels = s.labels
        loss = info_nce(logits)
        if s.emb.k1 is not None:  # the second direction: view 2's queries, view 1's keys
            if s.extra.shared is not None or s.extra.per_query is not None:
                raise ValueError(
                    "the two-direction loss (moco.symmetric_keys) takes no strategy negatives: "
                    "they belong to view 1's queries"
                )
            logits21 = moco_logits(s.emb.q2, s.emb.k1, s.queue, self.temperature)
            loss = loss + info_nce(logits21)
            logits, labels = torch.cat([logits, logits21]), torch.cat([labels, labels])
        # for the diagnostics on log steps only; the queue labels copied (the enqueue rewrites them)
        self._seen = (logits.detach(), labels, s.queue_labels.clone())
        return loss

    def diagnostics(self) -> dict[str, torch.Tensor | float]:
        """``contrast_top1``: MoCo's acc@1 (%), the own key ranked first among own + queue +
        extras (``main_moco.py`` logs it as Acc@1); ``effective_negatives`` (the contrast set's
        size) and ``false_negative_fraction`` (the queue keys with the query's label; synthetic
        extras count as negatives of no class), as every negative baseline logs them."""
        seen = getattr(self, "_seen", None)
        if seen is None:
            return {}
        return moco_diagnostics(*seen)
