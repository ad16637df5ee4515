"""Batch contrastive losses on a multiview batch ``z = [view1; view2]`` (2N, D).

Row i and row i + N are the two views of sample i; labels have one entry per row (2N). Every
function returns the MEAN over anchors (the papers write sums, a factor 2N). Equations:

- NT-Xent, eq. 1 of [0]: ℓ_i = −log[e^{z_i·z_{i+}/τ} / Σ_{a≠i} e^{z_i·z_a/τ}].
- SupCon "out", eq. 2 of [1]: P(i) = {p ≠ i : y_p = y_i},
  ℓ_i = −(1/|P(i)|) Σ_{p∈P(i)} log[e^{z_i·z_p/τ} / Σ_{a≠i} e^{z_i·z_a/τ}].
- SINCERE, eq. 12 of [2], N(i) = {n : y_n ≠ y_i}:
  ℓ(i, p) = −log[e^{z_i·z_p/τ} / (e^{z_i·z_p/τ} + Σ_{n∈N(i)} e^{z_i·z_n/τ})],
  mean over P(i), then over anchors; same-class views other than p are in no denominator.
- FIRM, eq. 2 of [0]: SupCon with P(i) = every other in-distribution view if i is in-distribution,
  else {i+}; denominator B \\ {i}.

All reduce to NT-Xent with all-distinct labels (FIRM: with no in-distribution sample), and FIRM
with only in-distribution samples is single-class SupCon.

Use: these are the papers' reference forms, not what the trainer calls (its losses run in MoCo's
layout, ``pretrain.losses.queue_layout``). With ``loss.symmetric: true`` and
``loss.contrast_queue: false`` each registered loss must equal its function here in value and
gradient (tests/pretrain/losses/test_loss_modules.py,
tests/pretrain/losses/test_queue_layout_loss.py), and a SimCLR-style loop outside the trainer can
call them directly on a ``[view1; view2]`` batch::

    z = F.normalize(torch.cat([head(net(x1)), head(net(x2))]), dim=1)  # (2N, D)
    loss = supcon(z, torch.cat([y, y]), temperature=0.1)

[0] Lunardi et al., "Contrastive Representation Modeling for Anomaly Detection" (FIRM), ECAI
    2025, https://arxiv.org/abs/2501.05130; implementation based on [3].
[1] Khosla et al., "Supervised Contrastive Learning", NeurIPS 2020,
    https://arxiv.org/abs/2004.11362; code: HobbitLong/SupContrast @ 66a8fe5 ``losses.py``.
[2] Feeney & Hughes, "SINCERE", https://arxiv.org/abs/2309.14277; code: tufts-ml/SupContrast
    ``revised_losses.py``.
[3] https://github.com/Willtl/firm ``firm/loss.py`` (d39fde8) and ``losses.py`` (b26a3ce).
"""

from __future__ import annotations

import torch

from pretrain.losses.masked import (
    REFERENCE_BASE_TEMPERATURE,
    check_temperature,
    compute_dtype,
    denominator_loss,
    sincere_loss,
)

FIRM_LAYOUTS = ("concat", "pairwise")


def _logits(z: torch.Tensor, temperature: float) -> torch.Tensor:
    """(2N, 2N) logits z zᵀ / τ in the compute dtype; checks z is (2N, D) with N >= 1."""
    check_temperature(temperature)
    if z.dim() != 2 or z.shape[0] == 0 or z.shape[0] % 2:
        raise ValueError(
            f"z must be (2N, D) with views stacked [view1; view2], got shape {tuple(z.shape)}"
        )
    z = z.to(compute_dtype(z.dtype))
    return torch.einsum("id,jd->ij", z, z).to(z.dtype) / temperature  # (2N, 2N)


def _check_rows(name: str, values: torch.Tensor, rows: int) -> None:
    if values.shape != (rows,):
        raise ValueError(
            f"{name} must have shape ({rows},), one per row of z, got {tuple(values.shape)}"
        )


def _pair_mask(rows: int, device: torch.device) -> torch.Tensor:
    """(2N, 2N) bool, True at (i, i+) with i+ = (i + N) mod 2N."""
    idx = torch.arange(rows, device=device)
    return idx.unsqueeze(0) == ((idx + rows // 2) % rows).unsqueeze(1)


def _not_self(rows: int, device: torch.device) -> torch.Tensor:
    return ~torch.eye(rows, dtype=torch.bool, device=device)


def nt_xent(z: torch.Tensor, temperature: float) -> torch.Tensor:
    """NT-Xent (SimCLR; eq. 1 of [0]): positive = the other view, denominator = all a ≠ i.

    Args:
        z: (2N, D) unit-norm embeddings, ``[view1; view2]``.
        temperature: τ.

    Returns:
        Scalar mean over the 2N anchors (0 when N = 1).
    """
    logits = _logits(z, temperature)
    rows = logits.shape[0]
    return denominator_loss(logits, _pair_mask(rows, z.device), _not_self(rows, z.device))


def supcon(
    z: torch.Tensor, labels: torch.Tensor, temperature: float, *, reference_scale: bool = False
) -> torch.Tensor:
    """SupCon "out" (eq. 2 of [1]): P(i) = same label ≠ i, A(i) = all ≠ i; positives stay in A(i).

    Args:
        z: (2N, D) unit-norm embeddings, ``[view1; view2]``.
        labels: (2N,) class of each row.
        temperature: τ.
        reference_scale: multiply by τ / 0.07 as SupContrast's code does (its base_temperature
            stays 0.07 when ``main_supcon.py`` sets only ``temperature``).
            NOTE: the default False is the paper's equation.

    Returns:
        Scalar mean over anchors of the mean over positives.
    """
    logits = _logits(z, temperature)
    rows = logits.shape[0]
    _check_rows("labels", labels, rows)
    not_self = _not_self(rows, z.device)
    positive = (labels.unsqueeze(1) == labels.unsqueeze(0)) & not_self
    loss = denominator_loss(logits, positive, not_self)
    return loss * (temperature / REFERENCE_BASE_TEMPERATURE) if reference_scale else loss


def sincere(z: torch.Tensor, labels: torch.Tensor, temperature: float) -> torch.Tensor:
    """SINCERE (eq. 12 of [2]): each positive's denominator is itself + the other-class views.

    The anchor-row form below equals eq. 12's row-of-p form because anchor and positive share a
    class (SEMANTICS §4). An anchor with no other-class view contributes 0 (not NaN).

    Args:
        z: (2N, D) unit-norm embeddings, ``[view1; view2]``.
        labels: (2N,) class of each row.
        temperature: τ (the authors recommend 0.1).

    Returns:
        Scalar mean over anchors of the mean over positives.
    """
    logits = _logits(z, temperature)
    rows = logits.shape[0]
    _check_rows("labels", labels, rows)
    same = labels.unsqueeze(1) == labels.unsqueeze(0)  # (2N, 2N)
    return sincere_loss(logits, same & _not_self(rows, z.device), ~same)


def firm(
    z: torch.Tensor, is_inlier: torch.Tensor, temperature: float, *, layout: str = "concat"
) -> torch.Tensor:
    """FIRM (eq. 2 of [0]): in-distribution anchors attract every other in-distribution view.

    ``layout="concat"`` is eq. 2: 2N x 2N, denominator B \\ {i}; an in-distribution anchor's
    positives are all other in-distribution views, a synthetic outlier's only its pair i+.

    ``layout="pairwise"`` is the authors' training default (``FIRMLoss`` of [3], package
    ``mode="pairwise"``): N x N and one-directional, view-1 anchors against the N view-2 keys,
    which form the whole denominator; an in-distribution anchor's positives are all
    in-distribution keys including its own pair, an outlier's only its own pair. Mean over N.
    NOTE: this is not eq. 2 (SEMANTICS §4); it is provided to reproduce the authors' runs.

    Args:
        z: (2N, D) unit-norm embeddings, ``[view1; view2]``.
        is_inlier: (2N,) bool, True for in-distribution rows (FIRM's y = 1).
        temperature: τ (FIRM: 0.2).
        layout: "concat" (eq. 2) or "pairwise" (authors' code).

    Returns:
        Scalar mean over anchors of the mean over positives.
    """
    if layout not in FIRM_LAYOUTS:
        raise ValueError(f"layout must be one of {FIRM_LAYOUTS}, got {layout!r}")
    if is_inlier.dtype != torch.bool:
        raise ValueError(
            f"is_inlier must be a bool tensor (True = in-distribution), got {is_inlier.dtype}; "
            "use e.g. labels >= 0"
        )
    logits = _logits(z, temperature)
    rows = logits.shape[0]
    _check_rows("is_inlier", is_inlier, rows)
    if layout == "pairwise":
        n = rows // 2
        logits = logits[:n, n:]  # (N, N): view-1 anchors x view-2 keys
        own = torch.eye(n, dtype=torch.bool, device=z.device)
        both_inlier = is_inlier[:n].unsqueeze(1) & is_inlier[n:].unsqueeze(0)
        return denominator_loss(logits, own | both_inlier, torch.ones_like(own))
    not_self = _not_self(rows, z.device)
    both_inlier = is_inlier.unsqueeze(1) & is_inlier.unsqueeze(0) & not_self
    positive = torch.where(is_inlier.unsqueeze(1), both_inlier, _pair_mask(rows, z.device))
    return denominator_loss(logits, positive, not_self)


def _pair_logits(z: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(2N, 1 + 2N) logits of every row: its partner first, then the row with itself and its
    partner at -inf (2N − 2 negatives), as the DCL/HCL code's ``get_negative_mask``."""
    rows = z.shape[0]
    if rows % 2:
        raise ValueError(f"z must stack two views, [view1; view2], got {rows} rows")
    logits = _logits(z, temperature)  # (2N, 2N)
    partner = (torch.arange(rows, device=z.device) + rows // 2) % rows
    pos = logits.gather(1, partner[:, None])  # (2N, 1)
    neg = logits.masked_fill(~_not_self(rows, z.device) | _pair_mask(rows, z.device), -torch.inf)
    return torch.cat([pos, neg], dim=1), partner


def debiased(z: torch.Tensor, temperature: float, tau_plus: float = 0.1) -> torch.Tensor:
    """Debiased contrastive loss (Chuang et al. 2020, eq. 5; chingyaoc/DCL ``main.py``) on
    ``z = [view1; view2]``: M = 2N − 2 negatives, class prior ``tau_plus``, floor M e^{−1/T}."""
    from pretrain.losses import reweighted

    reweighted.check(tau_plus)
    check_temperature(temperature)
    logits, _ = _pair_logits(z, temperature)
    return reweighted.debiased_hard_loss(logits, temperature, tau_plus)


def hard(
    z: torch.Tensor, temperature: float, tau_plus: float = 0.1, beta: float = 1.0
) -> torch.Tensor:
    """Hard-negative contrastive loss (Robinson et al. 2021, eq. 7; joshr17/HCL
    ``image/main.py``): the debiased estimator with importance weights e^{β s} / mean e^{β s}."""
    from pretrain.losses import reweighted

    reweighted.check(tau_plus, beta)
    check_temperature(temperature)
    logits, _ = _pair_logits(z, temperature)
    return reweighted.debiased_hard_loss(logits, temperature, tau_plus, beta)


def decoupled(
    z: torch.Tensor,
    temperature: float,
    sigma: float | None = None,
    *,
    weight_grad: bool = False,
    split_negatives: bool = False,
) -> torch.Tensor:
    """Decoupled contrastive loss (Yeh et al. 2022, eq. 6): the positive out of the denominator;
    with ``sigma`` the DCLW weight w = 2 − N softmax(z1·z2 / σ) over the N pairs, the same for both
    rows of a pair. Mean over the 2N anchors.

    The negative term is eq. 6's: ONE log-sum-exp over the 2N − 2 other rows of both views.
    ``split_negatives=True`` is lightly's ``DCLLoss``/``DCLWLoss`` instead, which sums two
    log-sum-exps, one over the anchor's own view's N − 1 others and one over the other view's
    N − 1 non-partners (a different loss: each group's softmax sums to 1).
    NOTE: lightly's split deviates from eq. 6; the default follows the paper.

    ``weight_grad=False`` (default): w is a constant, computed from detached outputs, as lightly's
    ``negative_mises_fisher_weights``; with ``split_negatives=True`` this equals lightly's
    ``DCLWLoss`` in value and gradient. ``weight_grad=True`` differentiates through w (same
    value). raminnakhli/Decoupled-Contrastive-Learning, which lightly cites, has eq. 6's single
    log-sum-exp and differentiates through w, but omits the factor N (w = 2 − softmax) and sums
    the two directions: equal to no setting here (:mod:`pretrain.losses.reweighted`)."""
    from pretrain.losses import reweighted

    reweighted.check(0.0, 0.0, sigma)
    check_temperature(temperature)
    logits, partner = _pair_logits(z, temperature)
    weight = None
    if sigma is not None:
        n = z.shape[0] // 2
        w = reweighted.vmf_weights((z[:n] * z[n:]).sum(1), sigma, weight_grad=weight_grad)
        weight = torch.cat([w, w])
    if not split_negatives:
        return reweighted.decoupled_loss(logits, weight)
    rows = z.shape[0]
    if rows < 4:
        raise ValueError("split_negatives needs N >= 2 pairs (each view's group has N - 1 rows)")
    view = torch.arange(rows, device=z.device) < rows // 2
    same = view.unsqueeze(0) == view.unsqueeze(1)  # (2N, 2N): column in the anchor's view
    neg = logits[:, 1:]  # self and partner already at -inf
    lse = torch.logsumexp(neg.masked_fill(~same, -torch.inf), dim=1) + torch.logsumexp(
        neg.masked_fill(same, -torch.inf), dim=1
    )
    pos = logits[:, 0] if weight is None else weight * logits[:, 0]
    return (lse - pos).mean()
