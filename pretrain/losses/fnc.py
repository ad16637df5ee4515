"""``loss.name: fnc``: false negative cancellation (Huynh et al. 2022, "Boosting Contrastive
Self-Supervised Learning with False Negative Cancellation", WACV 2022,
https://arxiv.org/abs/2011.11765; official code google-research/fnc, ``objective.py``
``add_contrastive_loss_with_memory``).

False negatives are found through a support set: each image also gets ``data.support_views``
augmented views (official: 8), encoded by the momentum encoder. A candidate negative j of query i
scores the best agreement with any of i's views (aggregation by max, §3.3):

    score_ij = max_v s_v(i) · c_j,   v ∈ {the key, the support views}

and is a false negative when it is among the row's top ``fn_topk`` scores (official 10) *and*
above ``fn_threshold`` (official 0.7). Then, with s the logits / T:

- ``elimination`` (the paper's eq. 2, after its contrastive loss eq. 1): the false negatives
  leave the denominator,
  ℓ_i = −s_pos + log(e^{s_pos} + Σ_{j ∉ F_i} e^{s_j});
- ``attraction`` (eq. 3, and the official code's only loss): they become positives,
  ℓ_i = −(s_pos + Σ_{j ∈ F_i} s_j) / (1 + |F_i|) + log(e^{s_pos} + Σ_j e^{s_j}).

In MoCo's layout (ours) the candidates are the queue (the official memory bank of momentum
embeddings); the strategy's synthetic extras are never false negatives. The official code scores
with the momentum embeddings of all views of the image (both main views and the supports) and
also uses the support views as extra positive anchors (multi-crop); here the query's own key and
the supports score, and the supports serve detection only. Official ImageNet settings: batch 4096,
T 0.1, support 8 at the full 224 px crop; our CIFAR-10 / digits choices are in the configs.
(Equation numbers from a summary that quotes the paper's "contrastive loss (1)" and gives the two
variants in this order; the PDF itself was not reachable from here.)
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

import torch

from negmine_core.step import Step
from pretrain.losses.base import Loss, register
from pretrain.losses.infonce import moco_logits

Mode = Literal["attraction", "elimination"]
MODES = get_args(Mode)


def detect(
    views: torch.Tensor, candidates: torch.Tensor, topk: int, threshold: float
) -> torch.Tensor:
    """False negatives (N, M) bool: for views (N, V, D) of each image and candidates (M, D), the
    top-``topk`` of the max-over-views similarity that also exceed ``threshold``."""
    scores = torch.einsum("nvd,md->nvm", views, candidates.to(views.dtype)).amax(dim=1)
    k = min(topk, scores.shape[1])
    top = torch.zeros_like(scores, dtype=torch.bool)
    top.scatter_(1, scores.topk(k, dim=1).indices, True)
    return top & (scores > threshold)


def fnc_loss(logits: torch.Tensor, false_neg: torch.Tensor, mode: str) -> torch.Tensor:
    """Mean FNC loss; ``logits`` (N, 1 + M) positive first (/ T), ``false_neg`` (N, M') bool over
    the first M' <= M negatives (the queue)."""
    pos = logits[:, 0]
    fn = torch.zeros_like(logits, dtype=torch.bool)
    fn[:, 1 : 1 + false_neg.shape[1]] = false_neg
    if mode == "elimination":
        kept = logits.masked_fill(fn, -torch.inf)
        return (torch.logsumexp(kept, dim=1) - pos).mean()
    if mode == "attraction":
        num = (pos + (logits * fn).sum(dim=1)) / (1.0 + fn.sum(dim=1))
        return (torch.logsumexp(logits, dim=1) - num).mean()
    raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")


@register("fnc")
class FNC(Loss):
    """FNC (Huynh et al. 2022; google-research/fnc): false negatives in the queue found
    through the support views, eliminated or attracted.

    Args:
        mode: ``attraction`` (eq. 3, the official code's) or ``elimination`` (eq. 2).
        fn_topk: a false negative is among the row's top ``fn_topk`` scores, positive
            (official: 10) ...
        fn_threshold: ... and scores above this cosine, in [-1, 1] (official: 0.7).
    """

    syncs_why = "the false negatives are a mask (top-k AND threshold), never a count on the host"

    capturable = True

    batch_layout = False  # MoCo's layout
    extra_views = 1  # data.support_views: the support set's keys (s.emb.support)

    def __init__(
        self,
        temperature: float,
        *,
        mode: Mode = "attraction",
        fn_topk: Annotated[int, "must be a positive integer"] = 10,
        fn_threshold: float = 0.7,
    ) -> None:
        super().__init__(temperature)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if isinstance(fn_topk, bool) or not isinstance(fn_topk, int) or fn_topk < 1:
            raise ValueError(f"fn_topk must be a positive integer, got {fn_topk!r}")
        if not -1.0 <= fn_threshold <= 1.0:
            raise ValueError(f"fn_threshold is a cosine in [-1, 1], got {fn_threshold}")
        self.mode, self.fn_topk, self.fn_threshold = mode, fn_topk, fn_threshold

    def forward(self, s: Step) -> torch.Tensor:
        if s.emb.support is None:
            raise ValueError("fnc needs the support views' keys (data.support_views > 0)")
        logits = moco_logits(
            s.emb.q, s.emb.k, s.queue, self.temperature, s.extra.shared, s.extra.per_query
        )
        views = torch.cat([s.emb.k.unsqueeze(1), s.emb.support], dim=1).detach()  # (N, 1 + V, D)
        false_neg = detect(views, s.queue, self.fn_topk, self.fn_threshold)
        self._seen = (logits.detach(), false_neg, s.labels, s.queue_labels.clone())
        return fnc_loss(logits, false_neg, self.mode)

    def diagnostics(self) -> dict[str, torch.Tensor | float]:
        """``effective_negatives``: negatives left after the false negatives;
        ``false_negative_fraction``: the share of those with the query's label; ``detected``:
        false negatives per query; ``detection_precision``: % of them with the query's label."""
        seen = getattr(self, "_seen", None)
        if seen is None:
            return {}
        logits, fn, labels, queue_labels = seen
        n, k = fn.shape
        neg = logits[:, 1:]
        kept = torch.zeros_like(neg, dtype=torch.bool)
        kept[:, :k] = fn
        masked = neg.masked_fill(kept, -torch.inf)  # uniform weights over the remaining
        unknown = torch.full((n, neg.shape[1] - k), -1, dtype=torch.long, device=neg.device)
        neg_labels = torch.cat([queue_labels.expand(n, -1), unknown], dim=1)
        same = (queue_labels[None, :] == labels[:, None]) & (labels[:, None] >= 0)
        remaining = torch.isfinite(masked)
        known = (labels >= 0).float()
        share = ((neg_labels == labels[:, None]) & remaining).sum(1) / remaining.sum(1)
        found = fn.sum(1).float()
        out = {
            "effective_negatives": remaining.sum(1).float().mean(),
            "false_negative_fraction": (share * known).sum() / known.sum().clamp(min=1.0),
            "detected": found.mean(),
            "detection_precision": 100.0 * (fn & same).sum() / fn.sum().clamp(min=1),
            "contrast_top1": (logits.argmax(dim=1) == 0).float().mean() * 100.0,
        }
        return out
