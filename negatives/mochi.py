"""``mochi`` and ``modified_mochi``: hard negative mixing on the MoCo queue (MoCHi)."""

from __future__ import annotations

from functools import cache
from typing import Annotated, NamedTuple

import torch
import torch.nn.functional as F

from negatives.base import (
    MAX_SYNTHETIC,
    ExtraNegatives,
    NegativeStrategy,
    Step,
    strategies,
)


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
    ordered pairs with i != j (j = i + U{1..N-1} mod N). Without it i and j come from one
    ``randint`` of shape (2, rows, s): on a CPU the numbers of two consecutive draws; β is drawn as
    U(0, 0.5) directly (on a CPU bit for bit 0.5 · U(0, 1)).
    """
    if distinct_pair:
        i = torch.randint(num_hard, (rows, num_mix), device=device)
        j = torch.randint(1, num_hard, (rows, num_mix), device=device).add_(i).remainder_(num_hard)
    else:
        i, j = torch.randint(num_hard, (2, rows, num_mix), device=device)
    alpha = torch.rand(rows, num_mix, device=device, dtype=dtype)
    jq = torch.randint(num_hard, (rows, num_query_mix), device=device)
    beta = torch.empty(rows, num_query_mix, device=device, dtype=dtype).uniform_(0, 0.5)
    return Draws(i, j, alpha, jq, beta)


def choose_queries(batch: int, count: int, device: torch.device) -> torch.Tensor:
    """(count,) query indices, uniform with replacement (modified MoCHi)."""
    return torch.randint(batch, (count,), device=device)


def positions(d: Draws) -> torch.Tensor:
    """(R, 2s + s') positions in each row's hard set, [i, j, jq]: every key a row mixes, so that
    the keys (and their labels) are gathered by one op."""
    return torch.cat([d.i, d.j, d.jq], dim=1)


def mix(n: torch.Tensor, q: torch.Tensor, d: Draws) -> torch.Tensor:
    """The s points h then the s' points h' of each row, from the keys at :func:`positions`:

        h  = normalize(α n_i + (1−α) n_j),   h' = normalize(β q + (1−β) n_jq)

    computed as one ``normalize(w ⊙ first + (1 − w) ⊙ second)`` with w = [α, β], first =
    [n_i, q], second = [n_j, n_jq]: the same products and sums as the two formulas apart.

    Shapes: n (R, 2s + s', D); q (R, s', D) the query of each h' (or broadcastable: (R, 1, D));
    d's fields (R, s) and (R, s') -> (R, s + s', D).
    """
    s, s2 = d.i.shape[1], d.jq.shape[1]
    first = torch.cat([n[:, :s], q.expand(n.shape[0], s2, n.shape[2])], dim=1)
    w = torch.cat([d.alpha, d.beta], dim=1).unsqueeze(-1)
    return F.normalize(w * first + (1 - w) * n[:, s:], dim=-1)


def false_negatives(key_labels: torch.Tensor, y: torch.Tensor, s: int) -> torch.Tensor:
    """(R, s + s') bool: the point was built from a key of its query's class (n_i or n_j for h,
    n_jq for h'); an unknown or outlier query label (< 0) is never the same class.

    Shapes: key_labels (R, 2s + s'), the labels at :func:`positions`; y the label of the query
    of each position, (R, 2s + s') or broadcastable ((R, 1): one query per row) -> (R, s + s').
    """
    same = (key_labels == y) & (y >= 0)  # (R, 2s + s'): [i, j, jq]
    flags = same[:, s:]  # [j, jq]: a view, or-ed in place with i
    if s:
        flags[:, :s].bitwise_or_(same[:, :s])  # in place (``|=`` on a slice copies back)
    return flags


def mean_weights(
    s: int, s2: int, dtype: torch.dtype = torch.float32, device: torch.device | None = None
) -> torch.Tensor:
    """(s + s', 3): a row of s + s' per-point values times it is [mean over the h part, mean
    over the h' part, mean over all] (the column of an empty part is zero)."""
    w = torch.zeros(s + s2, 3, dtype=dtype, device=device)
    w[:s, 0], w[s:, 1], w[:, 2] = 1 / max(s, 1), 1 / max(s2, 1), 1 / max(s + s2, 1)
    return w


@cache
def working_dtype(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    """The dtype the strategy computes in: q's and the queue's, at least float32 (cached: each
    ``torch.promote_types`` is a dispatched op)."""
    return torch.promote_types(torch.promote_types(a, b), torch.float32)


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
    - [2] MiOC (MiOC), appendix A.1.

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

    capturable = True
    contract_kwargs = {"num_hard": 16, "num_mix": 8, "num_query_mix": 4, "warmup_epochs": 0}
    zero_kwargs = {"num_hard": 8, "num_mix": 0, "num_query_mix": 0, "warmup_epochs": 0.0}

    symmetric_ok = False  # its per-query hard negatives belong to view 1's queries

    def __init__(
        self,
        *,
        num_hard: Annotated[int, "must be >= 1 (the hard set size N)"] = 1024,
        num_mix: int = 512,
        num_query_mix: int = 128,
        warmup_epochs: Annotated[float, "must be >= 0 (0 mixes from the start)"] = 10.0,
        distinct_pair: bool = False,
    ) -> None:
        super().__init__()
        counts = {"num_hard": num_hard, "num_mix": num_mix, "num_query_mix": num_query_mix}
        for name, value in counts.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
            if name != "num_hard" and value > MAX_SYNTHETIC:
                raise ValueError(
                    f"{name} must be at most {MAX_SYNTHETIC} (synthetic points per query and "
                    f"step; the paper uses 1024 or fewer), got {value}"
                )
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
        # (s + s', 3) float32 weights that average per-point values (diagnostics); not saved
        self.register_buffer("point_means", mean_weights(num_mix, num_query_mix), persistent=False)
        # modified MoCHi's point of each position [i, j, jq]: [0..s-1, 0..s-1, s..s+s'-1]
        rows = torch.cat([torch.arange(num_mix), torch.arange(num_mix + num_query_mix)])
        self.register_buffer("point_rows", rows, persistent=False)

    def _prepare(
        self, q: torch.Tensor, queue: torch.Tensor, epoch: float
    ) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """Detached copies in the working dtype (>= float32); False when this step does not mix."""
        work = working_dtype(q.dtype, queue.dtype)
        qw, keys = q.detach().to(work), queue.detach().to(work)
        mixes = epoch >= self.warmup_epochs and self.num_mix + self.num_query_mix > 0
        if mixes:
            self.check_sizes(keys.shape[0], q.shape[0])
        return qw, keys, mixes

    def _record(self, values: torch.Tensor, labelled: bool) -> None:
        """Diagnostics from per-point values (s + s',): q·point averaged over the batch, stacked
        (2, s + s') over the false-negative flags when ``labelled``: one matmul averages them."""
        w = self.point_means
        if w.dtype != values.dtype or w.device != values.device:  # float64, or not moved with
            w = mean_weights(self.num_mix, self.num_query_mix, values.dtype, values.device)  # .to
        means = values @ w  # (3,) or (2, 3): [h, h', all]
        sims, fns = (means[0], means[1]) if labelled else (means, None)
        st = self._stats
        if self.num_mix:
            st["sim_mix"] = sims[0]
            if fns is not None:
                st["false_neg_mix"] = fns[0]
        if self.num_query_mix:
            st["sim_query_mix"] = sims[1]
            if fns is not None:
                st["false_neg_query_mix"] = fns[1]
        if fns is not None:
            st["false_neg"] = fns[2]

    def check_sizes(self, queue_size: int, batch_size: int) -> None:
        if self.num_mix + self.num_query_mix > 0 and self.num_hard > queue_size:
            raise ValueError(
                f"num_hard={self.num_hard} exceeds the queue size K={queue_size}: the hard set"
                f" is the N hardest queue keys; use num_hard <= {queue_size} or a larger queue"
            )

    def _draw(self, rows: int, q: torch.Tensor) -> Draws:
        args = self.num_hard, self.num_mix, self.num_query_mix, self.distinct_pair
        return draw(rows, *args, q.device, q.dtype)

    def negatives(self, step: Step) -> ExtraNegatives:
        q, _, labels = step.detached()
        queue_labels = step.queue_labels
        qw, keys, mixes = self._prepare(q, step.queue, step.ctx.epoch)
        if not mixes:
            self._stats = {"sim_queue": qw.mean(0) @ keys.mean(0)}  # mean q·n, batch × queue
            return ExtraNegatives()
        sim = qw @ keys.T  # (B, K)
        top, hard = sim.topk(self.num_hard, dim=1)  # (B, N): each query's own hard set
        self._stats = {"sim_queue": sim.mean(), "sim_hard": top.mean()}
        # Under DDP draw for the global batch and keep this rank's rows: ranks share the RNG
        # state, so local draws would repeat on every rank; one process draws the same rows.
        rank, world = step.ctx.rank, step.ctx.world_size
        n = q.shape[0]
        d = Draws(*(t[rank * n : (rank + 1) * n] for t in self._draw(n * world, qw)))
        at = hard.gather(1, positions(d))  # (B, 2s + s'): queue index of every key mixed
        points = mix(keys[at], qw.unsqueeze(1), d)  # (B, s + s', D): [H(q), H'(q)]
        values = (points @ qw.unsqueeze(-1)).squeeze(-1)  # (B, s + s'): q·h, q·h'
        if labels is not None:
            flags = false_negatives(queue_labels[at], labels.unsqueeze(1), self.num_mix)
            values = torch.stack([values, flags])  # (2, B, s + s'), flags as 0/1
        self._record(values.mean(-2), labels is not None)
        return ExtraNegatives(per_query=points.to(q.dtype))

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
    #: 37 ops over the digits step's 231 (+16 %) since stage 2 of the augmentation shrank to
    #: colour matrices: each chosen query's hard set ranked, gathered and mixed twice
    ops_budget = 0.2

    def negatives(self, step: Step) -> ExtraNegatives:
        q, _, labels = step.detached()
        queue_labels = step.queue_labels
        qw, keys, mixes = self._prepare(q, step.queue, step.ctx.epoch)
        q_mean = qw.mean(0)
        self._stats = {"sim_queue": q_mean @ keys.mean(0)}  # mean q·n, batch × queue
        if not mixes:
            return ExtraNegatives()
        s, batch = self.num_mix, q.shape[0]
        chosen = choose_queries(batch, s + self.num_query_mix, q.device)  # (s + s',)
        if s + self.num_query_mix < batch:
            q_chosen = qw[chosen]
            top, hard = (q_chosen @ keys.T).topk(self.num_hard, dim=1)  # (s + s', N)
        else:
            top, hard = (qw @ keys.T).topk(self.num_hard, dim=1)  # (B, N)
            top, hard, q_chosen = top[chosen], hard[chosen], qw[chosen]
        self._stats["sim_hard"] = top.mean()
        d = self._draw(1, qw)  # (1, s) and (1, s'): one point per chosen query
        rows = self.point_rows.to(hard.device)  # (a no-op once the strategy is on the device)
        at = hard[rows, positions(d)[0]]  # (2s + s',): queue index of every key mixed
        points = mix(keys[at].unsqueeze(0), q_chosen[s:].unsqueeze(0), d)[0]  # (s + s', D)
        values = points @ q_mean  # (s + s',): q·point averaged over the batch
        if labels is not None:
            y = labels[chosen][rows]  # (2s + s',): the query label of every key
            flags = false_negatives(queue_labels[at].unsqueeze(0), y.unsqueeze(0), s)[0]
            values = torch.stack([values, flags])  # (2, s + s'), flags as 0/1
        self._record(values, labels is not None)
        return ExtraNegatives(shared=points.to(q.dtype))
