"""``negatives.name: adco``: adversarial negatives (Hu et al. 2021, "AdCo: Adversarial Contrast for
Efficient Learning of Unsupervised Representations from Self-Trained Negative Adversaries",
CVPR 2021, https://arxiv.org/abs/2011.08435; official code maple-research-lab/AdCo).

A learnable bank W (D x K) replaces the queue. The encoder minimises the contrastive loss
over [the gathered batch keys; the normalised bank columns] at temperature T (``moco.temperature``;
official 0.12), the other keys of the batch being negatives too (``training/train.py``
``update_network``); the bank maximises the same loss at its own temperature τ_m (gradient
ascent), with SGD momentum and weight decay (equation numbers not checked here, no access to the
paper text: the official ``training/train.py`` is what the tests re-derive):

    p_nk = softmax_k([q_n·k_all, q_n·ŵ] / τ_m)  restricted to the bank columns,  ŵ_k = w_k / |w_k|
    g_k  = −( Σ_n p_nk q_n / B − mean_n(p_nk q_n·ŵ_k) ŵ_k ) / (|w_k| τ_m)     (= −∂ℓ/∂w_k)
    v ← m v + g + λ W,   W ← W − η v

Official defaults (ImageNet, ``ops/argparser.py``): K = 65536 (``--cluster``), τ_m 0.02
(``--mem_t``), η = 3 (``--memory_lr``), λ = 1e-4 (``--mem_wd``), m = 0.9 (the SGD momentum), bank
initialised from keys (``--ad_init 1``). There is no official CIFAR setting; our digits / CIFAR-10
bank sizes are in the configs.

In this toolkit the strategy hands the normalised bank to the loss as shared negatives (the bank
before this step's update, as the official code computes the encoder's logits before it updates
the bank) and updates the bank from the gathered queries of the same step, so every rank holds the
same bank and 2 ranks equal one process (the official code all-reduces the per-rank gradients:
the same mean). It needs a loss that leaves the queue out (``loss.contrast_queue: false`` with
``nt_xent``, AdCo's own loss, or a labelled batch loss). ``ad_init`` (ours, in the loop): the
bank's columns are overwritten with the gathered keys of the first ⌈K/B⌉ steps (their momentum
reset); the official code instead runs a separate pass over K/B batches before epoch 0, training
the encoder against the random bank, and then copies the query encoder into the key encoder.
W, its momentum v and the fill count are in the checkpoint.
"""

from __future__ import annotations

from typing import Annotated, Any

import torch

from negatives.base import ExtraNegatives, NegativeStrategy, Step, strategies
from negmine_core.step import SetupContext


def normalize_columns(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(ŵ, |w|): the unit columns of W (D, K), as ``F.normalize(w, dim=0)``, and the norms (1, K)
    they were divided by (before the clamp), kept for the gradient."""
    norm = torch.linalg.vector_norm(w, dim=0, keepdim=True)
    return w / norm.clamp_min(1e-12), norm


def bank_gradient(
    q: torch.Tensor,
    k: torch.Tensor,
    w: torch.Tensor,
    mem_t: float,
    columns: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """AdCo's ascent direction g (D, K) for bank W (D, K) from queries q (B, D) and keys k (B, D)
    (the official closed form, ``training/train.py``), and the batch columns' softmax mass (B,).
    ``columns``: :func:`normalize_columns` of W when the caller has them."""
    w_hat, w_norm = normalize_columns(w) if columns is None else columns
    l_pos = q @ k.T  # (B, B): every key of the batch
    l_neg = q @ w_hat  # (B, K)
    prob = torch.softmax(torch.cat([l_pos, l_neg], dim=1) / mem_t, dim=1)
    p = prob[:, l_pos.shape[1] :]
    minus_g = (p * l_neg).mean(dim=0) * w_hat - q.T @ p / q.shape[0]  # -(Σ p q / B - mean(p l) ŵ)
    return minus_g / w_norm / mem_t, prob[:, : l_pos.shape[1]].sum(dim=1)


@strategies.register("adco")
class AdCo(NegativeStrategy):
    """A learnable bank of negatives, updated by gradient ascent on the contrastive loss.

    Args:
        bank_size: number of negatives in the bank, positive (official: 65536).
        mem_t: temperature tau_m of the bank's softmax, positive (official: 0.02).
        memory_lr: the bank's learning rate eta, positive (official: 3.0).
        mem_wd: the bank's weight decay lambda, >= 0 (official: 1e-4).
        momentum: the bank's SGD momentum m, in [0, 1) (official: 0.9).
        ad_init: overwrite the bank's columns with the gathered keys of the first ceil(K/B)
            steps (the official bank starts from keys too); False = the random initial bank.
    """

    syncs_why = "the fill count is a Python integer (module extra state)"

    capturable = True
    step_state = "its bank's fill count is a Python integer that changes every step until full"
    contract_kwargs = {"bank_size": 32}

    needs_global_batch = True  # the bank's gradient is the global batch's (every rank equal)
    replaces_queue = True

    def __init__(
        self,
        *,
        bank_size: Annotated[int, "must be a positive integer"] = 65536,
        mem_t: float = 0.02,
        memory_lr: float = 3.0,
        mem_wd: Annotated[float, "must be >= 0"] = 1e-4,
        momentum: float = 0.9,
        ad_init: bool = True,
    ) -> None:
        super().__init__()
        if isinstance(bank_size, bool) or not isinstance(bank_size, int) or bank_size < 1:
            raise ValueError(f"bank_size must be a positive integer, got {bank_size!r}")
        for name, value in {"mem_t": mem_t, "memory_lr": memory_lr}.items():
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if not mem_wd >= 0 or not 0 <= momentum < 1:
            raise ValueError(
                f"mem_wd must be >= 0 and momentum in [0, 1), got {mem_wd}, {momentum}"
            )
        self.bank_size, self.mem_t, self.memory_lr = bank_size, mem_t, memory_lr
        self.mem_wd, self.momentum, self.ad_init = mem_wd, momentum, ad_init
        self.filled = 0 if ad_init else bank_size  # columns written with keys (extra state)
        self._latest: tuple[torch.Tensor, torch.Tensor | None, int] | None = None

    def setup(self, ctx: SetupContext) -> None:
        """The bank W ~ N(0, 1) (official init) and its momentum, (ctx.dim, K)."""
        self.register_buffer("W", torch.randn(ctx.dim, self.bank_size))
        self.register_buffer("v", torch.zeros(ctx.dim, self.bank_size))

    def get_extra_state(self) -> dict[str, Any]:
        return {"filled": self.filled}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.filled = int(state["filled"])

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        if not hasattr(self, "W"):
            raise RuntimeError("adco: setup(ctx) must create the bank before training")
        q, k, labels = s.detached()
        q, k = q.to(self.W.dtype), k.to(self.W.dtype)
        columns = normalize_columns(self.W)
        bank = columns[0].T.contiguous()  # (K, D): this step's negatives
        g, batch_prob = bank_gradient(q, k, self.W, self.mem_t, columns)
        self.v.mul_(self.momentum).add_(g).add_(self.W, alpha=self.mem_wd)
        self.W.sub_(self.v, alpha=self.memory_lr)
        if self.filled < self.bank_size:  # ad_init: the first steps' keys become bank columns
            n = min(k.shape[0], self.bank_size - self.filled)
            self.W[:, self.filled : self.filled + n] = k[:n].T
            self.v[:, self.filled : self.filled + n] = 0.0
            self.filled += n
        # The statistics are computed by diagnostics() (logging steps only) from these.
        self._latest = (batch_prob, labels, k.shape[0])
        return ExtraNegatives(shared=bank)

    def diagnostics(self) -> dict[str, torch.Tensor | float]:
        """Latest step: the batch keys' softmax mass at τ_m (``batch_prob``, mean over queries),
        the mean column norm of the updated bank (``bank_norm``), the negatives per query
        (``effective_negatives``: B - 1 + K) and, with labels, the fraction of them sharing the
        query's class (``false_negative_fraction``). Computed here, not in the step: W is the
        step's updated bank until the next step."""
        if self._latest is None:
            return {}
        batch_prob, labels, b = self._latest
        stats: dict[str, torch.Tensor | float] = {
            "batch_prob": batch_prob.mean(),
            "bank_norm": self.W.norm(dim=0).mean(),
            "effective_negatives": float(b - 1 + self.bank_size),
        }
        if labels is not None:
            same = (labels[:, None] == labels[None, :]) & (labels[:, None] >= 0)
            same.fill_diagonal_(False)
            known = (labels >= 0).float()
            frac = same.sum(1).float() / (b - 1 + self.bank_size)
            stats["false_negative_fraction"] = (frac * known).sum() / known.sum().clamp(1.0)
        return stats
