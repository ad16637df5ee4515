"""``mochi`` and ``modified_mochi``: hard negative mixing on the MoCo queue (MoCHi)."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from negatives.base import ExtraNegatives, NegativeStrategy
from negatives.registry import strategies


class Draws(NamedTuple):
    """The random draws of one step. ``i``, ``j``, ``jq`` are positions in a hard set, [0, N)."""

    i: torch.Tensor  # (R, s) first key of each h
    j: torch.Tensor  # (R, s) second key of each h
    alpha: torch.Tensor  # (R, s) weight of n_i, U(0, 1)
    jq: torch.Tensor  # (R, s') key of each h'
    beta: torch.Tensor  # (R, s') weight of the query, U(0, 0.5)


def draw(
    rows: int,
    num_hard: int,
    num_mix: int,
    num_query_mix: int,
    distinct_pair: bool,
    device: torch.device,
    dtype: torch.dtype,
) -> Draws:
    """Draws for ``rows`` hard sets from the global RNG of ``device`` (no host sync).

    Positions are uniform with replacement; with ``distinct_pair`` the pair (i, j) is uniform over
    ordered pairs with i != j (j = i + U{1..N-1} mod N).
    """
    i = torch.randint(num_hard, (rows, num_mix), device=device)
    if distinct_pair:
        j = (i + torch.randint(1, num_hard, (rows, num_mix), device=device)) % num_hard
    else:
        j = torch.randint(num_hard, (rows, num_mix), device=device)
    alpha = torch.rand(rows, num_mix, device=device, dtype=dtype)
    jq = torch.randint(num_hard, (rows, num_query_mix), device=device)
    beta = 0.5 * torch.rand(rows, num_query_mix, device=device, dtype=dtype)
    return Draws(i, j, alpha, jq, beta)


def choose_queries(batch: int, count: int, device: torch.device) -> torch.Tensor:
    """(count,) query indices, uniform with replacement (modified MoCHi)."""
    return torch.randint(batch, (count,), device=device)


def mix_pairs(
    keys: torch.Tensor, hard: torch.Tensor, i: torch.Tensor, j: torch.Tensor, alpha: torch.Tensor
) -> torch.Tensor:
    """h = normalize(α n_i + (1−α) n_j), n_i, n_j from row r's own hard set ``hard[r]``.

    Shapes: keys (K, D), hard (R, N) queue indices, i, j, alpha (R, S) -> (R, S, D).
    """
    s = i.shape[1]
    n = keys[torch.gather(hard, 1, torch.cat([i, j], dim=1))]  # (R, 2S, D), gathered per row
    a = alpha.unsqueeze(-1)
    return F.normalize(a * n[:, :s] + (1 - a) * n[:, s:], dim=-1)


def mix_query(
    keys: torch.Tensor, q: torch.Tensor, hard: torch.Tensor, j: torch.Tensor, beta: torch.Tensor
) -> torch.Tensor:
    """h' = normalize(β q + (1−β) n_j), n_j from row r's own hard set ``hard[r]``.

    Shapes: keys (K, D), q (R, D), hard (R, N), j, beta (R, S) -> (R, S, D).
    """
    b = beta.unsqueeze(-1)
    return F.normalize(b * q.unsqueeze(1) + (1 - b) * keys[torch.gather(hard, 1, j)], dim=-1)


def _same_class(queue_labels: torch.Tensor, hard: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(R, N) bool: hard-set key has the class of row r's query; unknown (-1) is never the same."""
    y = y.unsqueeze(1)
    return (queue_labels[hard] == y) & (y >= 0)


@strategies.register("mochi")
class MoCHi(NegativeStrategy):
    """Hard negative mixing: per-query synthetic negatives from the hardest queue keys [0].

    With Q̃ᴺ(q) the N queue keys of largest q·n (the queue before this step's enqueue), each query
    gets s + s' private negatives (eqs. 6-7 of [2], restating §4.1-4.2 of [0]):

        h  = normalize(α n_i + (1−α) n_j),  n_i, n_j ∈ Q̃ᴺ(q),  α ~ U(0, 1)
        h' = normalize(β q + (1−β) n_j),    n_j ∈ Q̃ᴺ(q),       β ~ U(0, 0.5)

    so the logits are ``[q·k, q·queue, q·H(q), q·H'(q)] / T``, N×(1+K+s+s'). Everything is
    detached (the q inside h' too) and nothing synthetic is enqueued. Plain MoCo during warm-up.

    - [0] Kalantidis et al., Hard Negative Mixing for Contrastive Learning, NeurIPS 2020,
      https://arxiv.org/abs/2010.01028
    - [1] Implementation based on davidsvy/hard-negative-mixing (per-row ``torch.gather`` of the
      hard indices), https://github.com/davidsvy/hard-negative-mixing/blob/f9596358bbcb182ae9d3bf1c404cd0cd0501a082/src/moco.py
    - [2] Seed 001 (MiOC), appendix A.1.

    NOTE: the paper does not say how i, j are drawn. Default: uniform with replacement as [1]
    (i = j gives h = n_i); ``distinct_pair=True`` draws i != j as MaugrimEP/MocoAndMochi. That
    code indexes the flattened hard sets with positions in [0, N), so every query mixes query 0's
    hard negatives; here each query mixes its own.
    NOTE: N > K raises a ValueError at the first step that mixes (the queue size is not known
    before); warm-up steps do not check.
    NOTE: ``warmup_epochs`` compares with the fractional epoch ([1] counts steps); the query-mix
    set starts together with the pair-mix set (no separate start as [1]).

    Args:
        num_hard: N, size of each query's hard set (<= queue size K).
        num_mix: s, synthetic points h per query (0 disables).
        num_query_mix: s', synthetic points h' per query (0 disables).
        warmup_epochs: epochs of plain MoCo before mixing starts.
        distinct_pair: draw i != j for h (needs N >= 2).

    Shapes: q, k (B, D); queue (K, D); queue_labels (K,); labels (B,); returns ``per_query``
    (B, s + s', D) in q's dtype, or no extras.
    """

    symmetric_ok = False  # its per-query hard negatives belong to view 1's queries

    def __init__(
        self,
        *,
        num_hard: int = 1024,
        num_mix: int = 512,
        num_query_mix: int = 128,
        warmup_epochs: float = 10.0,
        distinct_pair: bool = False,
    ) -> None:
        super().__init__()
        counts = {"num_hard": num_hard, "num_mix": num_mix, "num_query_mix": num_query_mix}
        for name, value in counts.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if num_hard < 1:
            raise ValueError(f"num_hard must be >= 1 (the hard set size N), got {num_hard}")
        if isinstance(warmup_epochs, bool) or not isinstance(warmup_epochs, (int, float)):
            raise ValueError(f"warmup_epochs must be a number >= 0, got {warmup_epochs!r}")
        if not warmup_epochs >= 0:
            raise ValueError(
                f"warmup_epochs must be >= 0 (0 mixes from the start), got {warmup_epochs}"
            )
        if not isinstance(distinct_pair, bool):
            raise ValueError(f"distinct_pair must be true or false, got {distinct_pair!r}")
        if distinct_pair and num_hard < 2:
            raise ValueError(f"distinct_pair needs num_hard >= 2, got {num_hard}")
        self.num_hard, self.num_mix, self.num_query_mix = num_hard, num_mix, num_query_mix
        self.warmup_epochs, self.distinct_pair = float(warmup_epochs), distinct_pair
        self._stats: dict[str, torch.Tensor] = {}

    def _prepare(
        self, q: torch.Tensor, queue: torch.Tensor, epoch: float
    ) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """Detached copies in the working dtype (>= float32); False when this step does not mix."""
        work = torch.promote_types(torch.promote_types(q.dtype, queue.dtype), torch.float32)
        qw, keys = q.detach().to(work), queue.detach().to(work)
        self._stats = {"sim_queue": qw.mean(0) @ keys.mean(0)}  # = mean of q·n over batch×queue
        mixes = epoch >= self.warmup_epochs and self.num_mix + self.num_query_mix > 0
        if mixes:
            self.check_sizes(keys.shape[0], q.shape[0])
        return qw, keys, mixes

    def check_sizes(self, queue_size: int, batch_size: int) -> None:
        if self.num_mix + self.num_query_mix > 0 and self.num_hard > queue_size:
            raise ValueError(
                f"num_hard={self.num_hard} exceeds the queue size K={queue_size}: the hard set"
                f" is the N hardest queue keys; use num_hard <= {queue_size} or a larger queue"
            )

    def _draw(self, rows: int, q: torch.Tensor) -> Draws:
        args = self.num_hard, self.num_mix, self.num_query_mix, self.distinct_pair
        return draw(rows, *args, q.device, q.dtype)

    def negatives(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        queue: torch.Tensor,
        queue_labels: torch.Tensor,
        epoch: float,
        labels: torch.Tensor | None = None,
    ) -> ExtraNegatives:
        qw, keys, mixes = self._prepare(q, queue, epoch)
        if not mixes:
            return ExtraNegatives()
        top, hard = (qw @ keys.T).topk(self.num_hard, dim=1)  # (B, N): each query's own hard set
        # Under DDP draw for the global batch and keep this rank's rows: ranks share the RNG
        # state, so local draws would repeat on every rank; one process draws the same rows.
        rank, world = self.rank_and_world()
        n = q.shape[0]
        d = Draws(*(t[rank * n : (rank + 1) * n] for t in self._draw(n * world, qw)))
        st, parts, same = self._stats, [], []
        st["sim_hard"] = top.mean()
        fn = None if labels is None else _same_class(queue_labels, hard, labels)  # (B, N)
        if self.num_mix:
            h = mix_pairs(keys, hard, d.i, d.j, d.alpha)  # (B, s, D)
            parts.append(h)
            st["sim_mix"] = (qw * h.mean(1)).sum(1).mean()
            if fn is not None:
                same.append(fn.gather(1, d.i) | fn.gather(1, d.j))
                st["false_neg_mix"] = same[-1].float().mean()
        if self.num_query_mix:
            hq = mix_query(keys, qw, hard, d.jq, d.beta)  # (B, s', D)
            parts.append(hq)
            st["sim_query_mix"] = (qw * hq.mean(1)).sum(1).mean()
            if fn is not None:
                same.append(fn.gather(1, d.jq))
                st["false_neg_query_mix"] = same[-1].float().mean()
        if same:
            st["false_neg"] = torch.cat(same, dim=1).float().mean()
        return ExtraNegatives(per_query=torch.cat(parts, dim=1).to(q.dtype))

    def diagnostics(self) -> dict[str, torch.Tensor | float]:
        """Latest step, 0-dim device tensors: mean q·n over the queue (``sim_queue``), the hard
        sets (``sim_hard``), h (``sim_mix``), h' (``sim_query_mix``); with labels, the fraction of
        synthetic points built from a key of the query's class (``false_neg_mix``: n_i or n_j,
        ``false_neg_query_mix``: n_j, ``false_neg``: both sets)."""
        return dict(self._stats)


@strategies.register("modified_mochi")
class ModifiedMoCHi(MoCHi):
    """MoCHi with s + s' synthetic negatives shared by the batch ("modified MoCHi", [2] A.1).

    Each synthetic point picks its own query q_r uniformly (with replacement) from the global
    batch and is built from Q̃ᴺ(q_r) by the rules of :class:`MoCHi`:

        h  = normalize(α n_i + (1−α) n_j),  n_i, n_j ∈ Q̃ᴺ(q_r),  α ~ U(0, 1)
        h' = normalize(β q_r + (1−β) n_j),  n_j ∈ Q̃ᴺ(q_r),       β ~ U(0, 0.5)

    and all of them are appended after the queue for every query (as MiOC), so the logits are
    N×(1+K+s+s'). ``needs_global_batch``: under DDP every rank sees the same batch and RNG, hence
    the same points. No public code exists; this follows the text of [2] (see :class:`MoCHi`).

    NOTE: only the hard sets of the chosen queries are ranked, or those of the whole batch when
    s + s' >= B (fewer rows); the result is the same.
    NOTE: diagnostics ``sim_mix``/``sim_query_mix`` average q·h over batch × shared set (what the
    logits see); ``sim_hard`` and ``false_neg*`` refer to each point's chosen query.

    Args: as :class:`MoCHi`. Returns ``shared`` (s + s', D) in q's dtype, or no extras.
    """

    symmetric_ok = True  # its synthetic negatives are shared by every query

    needs_global_batch = True

    def negatives(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        queue: torch.Tensor,
        queue_labels: torch.Tensor,
        epoch: float,
        labels: torch.Tensor | None = None,
    ) -> ExtraNegatives:
        qw, keys, mixes = self._prepare(q, queue, epoch)
        if not mixes:
            return ExtraNegatives()
        s, batch = self.num_mix, q.shape[0]
        chosen = choose_queries(batch, s + self.num_query_mix, q.device)  # (s + s',)
        if s + self.num_query_mix < batch:
            top, hard = (qw[chosen] @ keys.T).topk(self.num_hard, dim=1)  # (s + s', N)
        else:
            top, hard = (qw @ keys.T).topk(self.num_hard, dim=1)  # (B, N)
            top, hard = top[chosen], hard[chosen]
        d = self._draw(1, qw)  # (1, s) and (1, s'): one point per chosen query
        st, parts, same = self._stats, [], []
        st["sim_hard"] = top.mean()
        fn = None if labels is None else _same_class(queue_labels, hard, labels[chosen])
        if s:
            h = mix_pairs(keys, hard[:s], d.i.T, d.j.T, d.alpha.T)[:, 0]  # (s, D)
            parts.append(h)
            st["sim_mix"] = qw.mean(0) @ h.mean(0)
            if fn is not None:
                same.append(fn[:s].gather(1, d.i.T) | fn[:s].gather(1, d.j.T))
                st["false_neg_mix"] = same[-1].float().mean()
        if self.num_query_mix:
            hq = mix_query(keys, qw[chosen[s:]], hard[s:], d.jq.T, d.beta.T)[:, 0]  # (s', D)
            parts.append(hq)
            st["sim_query_mix"] = qw.mean(0) @ hq.mean(0)
            if fn is not None:
                same.append(fn[s:].gather(1, d.jq.T))
                st["false_neg_query_mix"] = same[-1].float().mean()
        if same:
            st["false_neg"] = torch.cat(same).float().mean()
        return ExtraNegatives(shared=torch.cat(parts).to(q.dtype))
