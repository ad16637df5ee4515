"""Concentration-aware alignment of the probabilistic (vMF) contrastive method, the vMF-κ paper.

Each view has a mean direction μ (unit norm) and a concentration κ = softplus(κ_raw) > 0:

- L_align (eq. 10) = −λ_align · mean_i (κ1_i + κ2_i) · μ1_iᵀμ2_i,
- L_reg (eq. 11) = λ_reg · (mean_i κ1_i² + mean_i κ2_i²)   (eq. 7's minus sign is a typo).

The total objective (eq. 12) adds SimCLR's NT-Xent on (μ1, μ2), in which κ does not enter
(``tests/helpers/multiview.py``'s ``nt_xent``).

NOTE: the seed's appendix code computes L_align as −λ·log(exp((κ1+κ2)cos) + 1e-6), which equals
eq. 10 only while exp neither underflows nor overflows: it saturates at −λ·log(1e-6) ≈ 13.8λ
(zero gradient) once (κ1+κ2)cos < ≈ −14 and overflows float32 above ≈ 88.7. Eq. 10 is computed
directly here.
"""

from __future__ import annotations

import torch

from negmine_core.step import ONE_PROCESS, Batch, Step, StepContext
from pretrain.losses.base import DECLARED, Loss, SetupContext


def _flat_kappa(name: str, kappa: torch.Tensor, n: int) -> torch.Tensor:
    if kappa.shape not in ((n,), (n, 1)):
        raise ValueError(f"{name} must have shape ({n},) or ({n}, 1), got {tuple(kappa.shape)}")
    return kappa.reshape(n)


def kappa_terms(
    mu1: torch.Tensor,
    kappa1: torch.Tensor,
    mu2: torch.Tensor,
    kappa2: torch.Tensor,
    lambda_align: float,
    lambda_reg: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(L_align, L_reg)`` of eqs. 10-11, each already weighted by its λ.

    Args:
        mu1: (N, D) unit-norm mean directions of view 1.
        kappa1: (N,) or (N, 1) concentrations of view 1.
        mu2: (N, D) unit-norm mean directions of view 2.
        kappa2: (N,) or (N, 1) concentrations of view 2.
        lambda_align: λ_align (paper: 0.05).
        lambda_reg: λ_reg (paper: 0.005).
    """
    if mu1.dim() != 2 or mu1.shape != mu2.shape:
        raise ValueError(
            f"mu1 and mu2 must both be (N, D), got {tuple(mu1.shape)} and {tuple(mu2.shape)}"
        )
    n = mu1.shape[0]
    k1, k2 = _flat_kappa("kappa1", kappa1, n), _flat_kappa("kappa2", kappa2, n)
    cos = torch.einsum("nd,nd->n", mu1, mu2)  # (N,)
    l_align = -lambda_align * ((k1 + k2) * cos).mean()
    l_reg = lambda_reg * ((k1**2).mean() + (k2**2).mean())
    return l_align, l_reg


def kappa_alignment(
    mu1: torch.Tensor,
    kappa1: torch.Tensor,
    mu2: torch.Tensor,
    kappa2: torch.Tensor,
    lambda_align: float,
    lambda_reg: float,
) -> torch.Tensor:
    """L_align + L_reg (eqs. 10-11), see [`kappa_terms`][pretrain.losses.kappa_terms] for the
    arguments."""
    l_align, l_reg = kappa_terms(mu1, kappa1, mu2, kappa2, lambda_align, lambda_reg)
    return l_align + l_reg


class WithKappa(Loss):
    """Any loss + vMF-κ's L_align (eq. 10) + L_reg (eq. 11) on the kappa head: what the
    trainer builds when the model has one (``kappa.hidden`` > 0), in MoCo's layout (q,
    kappa_q) from the query encoder and (k, kappa_k) from the momentum encoder, so only the query
    side carries gradient. Its two weights are the config's ``kappa`` section, beside any loss::

        kappa: {hidden: 512, lambda_align: 0.05, lambda_reg: 0.005}

    Args:
        base: the loss the kappa terms are added to.
        lambda_align: λ_align of eq. 10 (vMF-κ: 0.05).
        lambda_reg: λ_reg of eq. 11 (vMF-κ: 0.005).
    """

    def __init__(
        self, base: Loss, *, lambda_align: float = 0.05, lambda_reg: float = 0.005
    ) -> None:
        super().__init__(base.temperature)
        self.base, self.lambda_align, self.lambda_reg = base, lambda_align, lambda_reg
        for declared in DECLARED:  # what the wrapped loss declares, it declares
            setattr(self, declared, getattr(base, declared))
        self._kappa: torch.Tensor | None = None
        self._terms: dict[str, torch.Tensor] = {}

    def setup(self, ctx: SetupContext) -> None:
        self.base.setup(ctx)

    def transform_batch(self, batch: Batch, ctx: StepContext = ONE_PROCESS) -> Batch:
        return self.base.transform_batch(batch, ctx)

    def forward(self, s: Step) -> torch.Tensor:
        if s.emb.kappa_q is None or s.emb.kappa_k is None:
            raise ValueError("the kappa loss needs a model with a kappa head")
        base = self.base(s)
        if s.emb.q2 is not None:  # symmetric: both views from the query encoder, as in the paper
            mu2, kappa2 = s.emb.q2, s.emb.kappa_q2
        else:
            mu2, kappa2 = s.emb.k.to(s.emb.q.dtype), s.emb.kappa_k
        kappa = kappa_alignment(
            s.emb.q, s.emb.kappa_q, mu2, kappa2, self.lambda_align, self.lambda_reg
        )
        self._kappa = s.emb.kappa_q.detach()
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
