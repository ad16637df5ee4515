"""NT-Xent, SupCon, SINCERE and FIRM on a [view1; view2] batch against numpy re-derivations.

References written from the papers (SEMANTICS §4), explicit loops over anchors and positives:
NT-Xent (FIRM eq. 1), SupCon "out" (Khosla et al. eq. 2), SINCERE (Feeney & Hughes 2023, eq. 12,
in its literal row-of-p form), FIRM (Lunardi et al., eq. 2) and the authors' pairwise FIRMLoss. Each
comparison covers the gradient with respect to z (every row carries gradient in this layout) as
well as the value: autograd on ours against central finite differences of the numpy reference
(``fd_grad``), and against autograd through pytorch-metric-learning's SupConLoss.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning.losses import SupConLoss

from tests.helpers.fd_grad import assert_grad_matches_fd, autograd
from tests.helpers.multiview import firm, nt_xent, sincere, supcon
from tests.helpers.vectors import logsumexp, unit

N, D = 6, 8
TOL = 1e-10

# per-sample labels (length N), repeated for the two views
SAMPLE_LABELS = {
    "mixed": [0, 0, 1, 2, 2, 2],  # class 1 has a single sample: its only positive is its pair
    "one_class": [3] * N,  # no negatives at all
    "distinct": list(range(N)),
}


def view_labels(name: str) -> torch.Tensor:
    return torch.tensor(SAMPLE_LABELS[name]).repeat(2)


def sims(z: np.ndarray, t: float) -> np.ndarray:
    return (z @ z.T) / t


def np_nt_xent(z, t):
    s, b = sims(z, t), len(z)
    losses = []
    for i in range(b):
        pair = (i + b // 2) % b
        others = [a for a in range(b) if a != i]
        losses.append(logsumexp(s[i, others]) - s[i, pair])
    return float(np.mean(losses))


def np_supcon(z, y, t):
    s, b = sims(z, t), len(z)
    losses = []
    for i in range(b):
        pos = [p for p in range(b) if p != i and y[p] == y[i]]
        lse = logsumexp(s[i, [a for a in range(b) if a != i]])
        losses.append(np.mean([lse - s[i, p] for p in pos]) if pos else 0.0)
    return float(np.mean(losses))


def np_sincere(z, y, t):
    """Eq. 12 literally: the denominator uses z_n·z_p (row of the positive p)."""
    s, b = sims(z, t), len(z)
    losses = []
    for i in range(b):
        pos = [p for p in range(b) if p != i and y[p] == y[i]]
        neg = [n for n in range(b) if y[n] != y[i]]
        terms = []
        for p in pos:
            log_den = logsumexp(np.array([s[i, p]] + [s[n, p] for n in neg]))
            terms.append(log_den - s[i, p])
        losses.append(np.mean(terms) if terms else 0.0)
    return float(np.mean(losses))


def np_firm_concat(z, inlier, t):
    s, b = sims(z, t), len(z)
    losses = []
    for i in range(b):
        if inlier[i]:
            pos = [p for p in range(b) if p != i and inlier[p]]
        else:
            pos = [(i + b // 2) % b]
        lse = logsumexp(s[i, [a for a in range(b) if a != i]])
        losses.append(np.mean([lse - s[i, p] for p in pos]) if pos else 0.0)
    return float(np.mean(losses))


def np_firm_pairwise(z, inlier, t):
    """Authors' FIRMLoss: view-1 anchors vs view-2 keys, cross-entropy to the positive set."""
    n = len(z) // 2
    s = sims(z, t)[:n, n:]
    losses = []
    for i in range(n):
        pos = [j for j in range(n) if j == i or (inlier[i] and inlier[n + j])]
        lse = logsumexp(s[i])
        losses.append(np.mean([lse - s[i, j] for j in pos]))
    return float(np.mean(losses))


@pytest.fixture
def z():
    return unit(2 * N, D, seed=0)


@pytest.mark.parametrize("t", [0.1, 0.5])
def test_nt_xent_matches_numpy(z, t):
    loss = nt_xent(z, t)
    assert loss.dtype == torch.float64
    assert loss.item() == pytest.approx(np_nt_xent(z.numpy(), t), abs=TOL)
    (grad,) = autograd(lambda v: nt_xent(v, t), z)
    assert_grad_matches_fd(grad, lambda v: np_nt_xent(v, t), z.numpy())


@pytest.mark.parametrize("name", sorted(SAMPLE_LABELS))
@pytest.mark.parametrize("t", [0.1, 0.5])
def test_supcon_matches_numpy(z, name, t):
    y = view_labels(name)
    ref = np_supcon(z.numpy(), y.numpy(), t)
    assert supcon(z, y, t).item() == pytest.approx(ref, abs=TOL)
    scaled = supcon(z, y, t, reference_scale=True).item()
    assert scaled == pytest.approx(ref * t / 0.07, abs=TOL)
    (grad,) = autograd(lambda v: supcon(v, y, t), z)
    grad_ref = assert_grad_matches_fd(grad, lambda v: np_supcon(v, y.numpy(), t), z.numpy())
    (grad_scaled,) = autograd(lambda v: supcon(v, y, t, reference_scale=True), z)
    np.testing.assert_allclose(
        grad_scaled, grad_ref * t / 0.07, rtol=1e-7, atol=1e-7 * np.abs(grad_ref).max() * t / 0.07
    )


def test_supcon_anchor_without_positive_counts_as_zero(z):
    # row 0's label appears nowhere else: it contributes 0 but still counts in the mean
    y = view_labels("mixed")
    y[0] = 9
    ref = np_supcon(z.numpy(), y.numpy(), 0.1)
    assert supcon(z, y, 0.1).item() == pytest.approx(ref, abs=TOL)
    assert sincere(z, y, 0.1).item() == pytest.approx(
        np_sincere(z.numpy(), y.numpy(), 0.1), abs=TOL
    )
    for ours, np_ref in ((supcon, np_supcon), (sincere, np_sincere)):
        (grad,) = autograd(lambda v, f=ours: f(v, y, 0.1), z)
        assert_grad_matches_fd(grad, lambda v, f=np_ref: f(v, y.numpy(), 0.1), z.numpy())


@pytest.mark.parametrize("name", ["mixed", "distinct"])
@pytest.mark.parametrize("t", [0.1, 0.3])
def test_supcon_matches_pytorch_metric_learning(z, name, t):
    # PML averages over anchors with a positive and a non-zero loss and returns 0 for a single
    # class; with pairs in the batch and several classes both conventions coincide.
    # PML normalises the embeddings inside (cosine similarity): its gradient is the tangential
    # part (I − z zᵀ) of ours at unit z, so ours is differentiated through F.normalize too.
    y = view_labels(name)
    assert supcon(z, y, t).item() == pytest.approx(SupConLoss(temperature=t)(z, y).item(), abs=TOL)
    (grad,) = autograd(lambda v: supcon(F.normalize(v, dim=1), y, t), z)
    (grad_pml,) = autograd(lambda v: SupConLoss(temperature=t)(v, y), z)
    assert np.abs(grad_pml).max() > 1e-2
    np.testing.assert_allclose(grad, grad_pml, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(SAMPLE_LABELS))
@pytest.mark.parametrize("t", [0.1, 0.5])
def test_sincere_matches_numpy(z, name, t):
    y = view_labels(name)
    loss = sincere(z, y, t)
    assert loss.item() == pytest.approx(np_sincere(z.numpy(), y.numpy(), t), abs=TOL)
    (grad,) = autograd(lambda v: sincere(v, y, t), z)
    if name == "one_class":  # no negatives: every reference term is log e^{s_ip} − s_ip = 0
        np.testing.assert_array_equal(grad, 0.0)
    else:
        assert_grad_matches_fd(grad, lambda v: np_sincere(v, y.numpy(), t), z.numpy())


def test_sincere_one_class_batch_is_zero_with_finite_gradient(z):
    z = z.clone().requires_grad_(True)
    loss = sincere(z, view_labels("one_class"), 0.1)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.isfinite(z.grad).all()


INLIER_PATTERNS = {
    "mixed": [True, True, False, True, False, False],
    "none": [False] * N,
    "all": [True] * N,
}


@pytest.mark.parametrize("pattern", sorted(INLIER_PATTERNS))
@pytest.mark.parametrize("t", [0.2, 0.5])
def test_firm_concat_matches_eq2(z, pattern, t):
    inlier = torch.tensor(INLIER_PATTERNS[pattern]).repeat(2)
    ref = np_firm_concat(z.numpy(), inlier.numpy(), t)
    assert firm(z, inlier, t).item() == pytest.approx(ref, abs=TOL)
    (grad,) = autograd(lambda v: firm(v, inlier, t), z)
    assert_grad_matches_fd(grad, lambda v: np_firm_concat(v, inlier.numpy(), t), z.numpy())


@pytest.mark.parametrize("pattern", sorted(INLIER_PATTERNS))
def test_firm_pairwise_matches_authors_layout(z, pattern):
    inlier = torch.tensor(INLIER_PATTERNS[pattern]).repeat(2)
    ref = np_firm_pairwise(z.numpy(), inlier.numpy(), 0.2)
    assert firm(z, inlier, 0.2, layout="pairwise").item() == pytest.approx(ref, abs=TOL)
    assert firm(z, inlier, 0.2, layout="pairwise").item() != pytest.approx(
        firm(z, inlier, 0.2).item(), abs=1e-3
    )
    (grad,) = autograd(lambda v: firm(v, inlier, 0.2, layout="pairwise"), z)
    assert_grad_matches_fd(grad, lambda v: np_firm_pairwise(v, inlier.numpy(), 0.2), z.numpy())


@pytest.mark.parametrize("t", [0.1, 0.5])
def test_reductions_to_nt_xent_and_single_class_supcon(z, t):
    distinct = view_labels("distinct")
    base = nt_xent(z, t).item()
    assert supcon(z, distinct, t).item() == pytest.approx(base, abs=TOL)
    assert sincere(z, distinct, t).item() == pytest.approx(base, abs=TOL)
    none = torch.zeros(2 * N, dtype=torch.bool)
    assert firm(z, none, t).item() == pytest.approx(base, abs=TOL)
    every = torch.ones(2 * N, dtype=torch.bool)
    single = torch.zeros(2 * N, dtype=torch.long)
    assert firm(z, every, t).item() == pytest.approx(supcon(z, single, t).item(), abs=TOL)


def test_one_pair_gives_zero_nt_xent():
    assert nt_xent(unit(2, D, seed=3), 0.1).item() == pytest.approx(0.0, abs=TOL)


LOSSES = {
    "nt_xent": lambda z: nt_xent(z, 0.2),
    "supcon": lambda z: supcon(z, torch.tensor([0, 1, 0, 0, 1, 0]), 0.2),
    "sincere": lambda z: sincere(z, torch.tensor([0, 1, 0, 0, 1, 0]), 0.2),
    "firm_concat": lambda z: firm(z, torch.tensor([True, False, True] * 2), 0.2),
    "firm_pairwise": lambda z: firm(
        z, torch.tensor([True, False, True] * 2), 0.2, layout="pairwise"
    ),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_gradcheck_float64(name):
    z = unit(6, 4, seed=4).requires_grad_(True)
    assert torch.autograd.gradcheck(LOSSES[name], (z,))


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_low_temperature_float32_is_finite_and_accurate(name):
    # τ = 0.002 makes logits span 1000: a naive exp over- or underflows in float32
    z64 = unit(6, 4, seed=5)
    fn = {
        "nt_xent": lambda z: nt_xent(z, 0.002),
        "supcon": lambda z: supcon(z, torch.tensor([0, 1, 0, 0, 1, 0]), 0.002),
        "sincere": lambda z: sincere(z, torch.tensor([0, 1, 0, 0, 1, 0]), 0.002),
        "firm_concat": lambda z: firm(z, torch.tensor([True, False, True] * 2), 0.002),
        "firm_pairwise": lambda z: firm(
            z, torch.tensor([True, False, True] * 2), 0.002, layout="pairwise"
        ),
    }[name]
    z32 = z64.float().requires_grad_(True)
    loss = fn(z32)
    loss.backward()
    assert loss.dtype == torch.float32
    assert torch.isfinite(z32.grad).all()
    assert loss.item() == pytest.approx(fn(z64).item(), rel=1e-4)


def test_half_precision_is_upcast(z):
    loss = supcon(z.bfloat16(), view_labels("mixed"), 0.1)
    assert loss.dtype == torch.float32
    ref = np_supcon(z.bfloat16().double().numpy(), view_labels("mixed").numpy(), 0.1)
    assert loss.item() == pytest.approx(ref, rel=1e-5)


def interpolate_loss(loss_fn, steps: int = 12) -> np.ndarray:
    """Loss along a path moving b = z[1] towards a = z[0], both class 0.

    Class 0 = rows {0, 1, 2, 3}; class 1 = rows {4, 5}. Rows 2..5 live in the subspace orthogonal
    to span(a, b), and b stays in span(a, b) along the path, so the only similarity that changes is
    a·b (it grows monotonically): every cross-class similarity is fixed.
    """
    a = torch.zeros(D, dtype=torch.float64)
    a[0] = 1.0
    b0 = torch.zeros(D, dtype=torch.float64)
    b0[0], b0[1] = np.cos(2.5), np.sin(2.5)
    rest = unit(4, D - 2, seed=6)
    rest = torch.cat([torch.zeros(4, 2, dtype=torch.float64), rest], dim=1)  # (4, D) ⟂ a, b
    labels = torch.tensor([0, 0, 1, 0, 0, 1])  # [view1; view2] with N = 3
    order = [0, 1, 4, 2, 3, 5]  # rows of [a, b, c, d, n1, n2] in batch order
    values = []
    for s in np.linspace(0.0, 1.0, steps):
        b = F.normalize((1 - s) * b0 + s * a, dim=0)
        rows = torch.stack([a, b, rest[0], rest[1], rest[2], rest[3]])
        z = rows[order]
        values.append(loss_fn(z, labels).item())
    return np.array(values)


def test_sincere_has_no_intra_class_repulsion_but_supcon_has():
    sinc = interpolate_loss(lambda z, y: sincere(z, y, 0.1))
    sup = interpolate_loss(lambda z, y: supcon(z, y, 0.1))
    assert np.all(np.diff(sinc) <= 1e-12)  # pulling same-class views together never hurts
    assert np.any(np.diff(sup) > 1e-3)  # SupCon penalises the positive that is already closest


def test_errors_are_clear(z):
    with pytest.raises(ValueError, match="views stacked"):
        nt_xent(z[:5], 0.1)
    with pytest.raises(ValueError, match="labels must have shape"):
        supcon(z, torch.zeros(N, dtype=torch.long), 0.1)
    with pytest.raises(ValueError, match="is_inlier must be a bool"):
        firm(z, torch.ones(2 * N, dtype=torch.long), 0.1)
    with pytest.raises(ValueError, match="layout must be one of"):
        firm(z, torch.ones(2 * N, dtype=torch.bool), 0.1, layout="sum")
    with pytest.raises(ValueError, match="temperature must be above"):
        sincere(z, view_labels("mixed"), 0.0)
