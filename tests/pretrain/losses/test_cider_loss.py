"""CIDER (Ming et al. 2023, SEMANTICS §6) against a numpy float64 re-derivation.

Reference: the per-sample EMA loop of Alg. 1 in batch order, μ_y ← normalize(α·μ_y + (1−α)·z_j);
L_dis (eq. 6) = (1/C) Σ_i log[(1/(C−1)) Σ_{j≠i} e^{μ_i·μ_j/τ}] on the updated prototypes;
L_comp (eq. 5) = −(1/2N) Σ_j log softmax_c(z_j·μ_c/τ)[y_j] with the updated prototypes held fixed.
The reference gradient (with respect to z, every row of which carries gradient) is a central
finite difference through the numpy functions, in every comparison of a term or the loss.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pretrain.losses import cider, cider_terms
from tests.helpers.fd_grad import assert_grad_matches_fd
from tests.helpers.vectors import logsumexp, unit

N, D, C = 5, 6, 4
TOL = 1e-10

SAMPLE_LABELS = {
    "mixed": [0, 2, 2, 3, 2],  # class 0 and 3 have one sample, class 1 is absent
    "one_class": [1] * N,
    "distinct": [0, 1, 2, 3, 0],
}


def np_ema(z, y, mu, alpha):
    mu = mu.copy()
    for j in range(len(z)):
        v = alpha * mu[y[j]] + (1 - alpha) * z[j]
        mu[y[j]] = v / np.linalg.norm(v)
    return mu


def np_dis(mu, t):
    c = len(mu)
    total = 0.0
    for i in range(c):
        others = [float(np.dot(mu[i], mu[j])) / t for j in range(c) if j != i]
        total += logsumexp(others) - np.log(c - 1)
    return total / c


def np_comp(z, y, mu, t):
    total = 0.0
    for j in range(len(z)):
        logits = np.array([float(np.dot(z[j], m)) / t for m in mu])
        total += logsumexp(logits) - logits[y[j]]
    return total / len(z)


def np_cider(z, y, mu0, alpha, t, lam, comp_mu=None):
    mu = np_ema(z, y, mu0, alpha)
    return np_dis(mu, t) + lam * np_comp(z, y, mu if comp_mu is None else comp_mu, t)


def finite_difference(fn, z, h=1e-6):
    grad = np.zeros_like(z)
    for idx in np.ndindex(*z.shape):
        up, down = z.copy(), z.copy()
        up[idx] += h
        down[idx] -= h
        grad[idx] = (fn(up) - fn(down)) / (2 * h)
    return grad


@pytest.fixture
def inputs():
    return unit(2 * N, D, seed=0), unit(C, D, seed=1)


def view_labels(name: str) -> torch.Tensor:
    return torch.tensor(SAMPLE_LABELS[name]).repeat(2)


@pytest.mark.parametrize("name", sorted(SAMPLE_LABELS))
@pytest.mark.parametrize("alpha", [0.95, 0.5, 0.0])
def test_terms_and_prototypes_match_numpy(inputs, name, alpha):
    z, mu0 = inputs
    y = view_labels(name)
    l_dis, l_comp, updated = cider_terms(z, y, mu0, alpha, 0.1)
    mu_ref = np_ema(z.numpy(), y.numpy(), mu0.numpy(), alpha)
    np.testing.assert_allclose(updated.numpy(), mu_ref, rtol=0, atol=TOL)
    assert l_dis.item() == pytest.approx(np_dis(mu_ref, 0.1), abs=TOL)
    assert l_comp.item() == pytest.approx(np_comp(z.numpy(), y.numpy(), mu_ref, 0.1), abs=TOL)
    # gradients: L_dis through the EMA, L_comp with the updated prototypes as constants
    zg = z.clone().requires_grad_(True)
    l_dis, l_comp, _ = cider_terms(zg, y, mu0, alpha, 0.1)
    g_dis, g_comp = (torch.autograd.grad(term, zg)[0].numpy() for term in (l_dis, l_comp))
    y_np, mu0_np = y.numpy(), mu0.numpy()
    assert_grad_matches_fd(g_dis, lambda v: np_dis(np_ema(v, y_np, mu0_np, alpha), 0.1), z.numpy())
    assert_grad_matches_fd(g_comp, lambda v: np_comp(v, y_np, mu_ref, 0.1), z.numpy())


def test_ema_is_sequential_not_a_batch_mean(inputs):
    z, mu0 = inputs
    y = view_labels("one_class")
    _, _, updated = cider_terms(z, y, mu0, 0.9, 0.1)
    v = 0.9 * mu0[1] + 0.1 * z.mean(dim=0)
    assert not torch.allclose(updated[1], v / v.norm(), atol=1e-3)
    assert torch.equal(updated[[0, 2, 3]], mu0[[0, 2, 3]])  # absent classes are untouched


@pytest.mark.parametrize("comp_scale", [False, True])
@pytest.mark.parametrize("dis_scale", [False, True])
@pytest.mark.parametrize("t", [0.1, 0.5])
def test_loss_matches_numpy(inputs, comp_scale, dis_scale, t):
    """The official code's scales: CompLoss x T/0.07, DisLoss x T/0.1 (base temperatures)."""
    z, mu0 = inputs
    y = view_labels("mixed")
    loss, updated = cider(z, y, mu0, 0.95, t, 2.0, comp_scale=comp_scale, dis_scale=dis_scale)
    mu_ref = np_ema(z.numpy(), y.numpy(), mu0.numpy(), 0.95)
    lam = 2.0 * (t / 0.07 if comp_scale else 1.0)
    dis = t / 0.1 if dis_scale else 1.0
    mu_np = np_ema(z.numpy(), y.numpy(), mu0.numpy(), 0.95)
    want = dis * np_dis(mu_np, t) + lam * np_comp(z.numpy(), y.numpy(), mu_np, t)
    assert loss.item() == pytest.approx(want, abs=TOL)
    assert not updated.requires_grad
    np.testing.assert_allclose(updated.norm(dim=1).numpy(), 1.0, atol=1e-12)
    np.testing.assert_allclose(updated.numpy(), mu_ref, atol=TOL)
    # gradient: L_dis through the EMA, L_comp with the updated prototypes as constants
    zg = z.clone().requires_grad_(True)
    loss, _ = cider(zg, y, mu0, 0.95, t, 2.0, comp_scale=comp_scale, dis_scale=dis_scale)
    (grad,) = torch.autograd.grad(loss, zg)
    y_np, mu0_np = y.numpy(), mu0.numpy()

    def reference(v):
        return dis * np_dis(np_ema(v, y_np, mu0_np, 0.95), t) + lam * np_comp(v, y_np, mu_ref, t)

    assert_grad_matches_fd(grad.numpy(), reference, z.numpy())


@pytest.mark.parametrize("name", ["mixed", "one_class"])
def test_dispersion_gradient_flows_through_the_ema(inputs, name):
    z, mu0 = inputs
    y = view_labels(name)
    z = z.clone().requires_grad_(True)
    l_dis, _, _ = cider_terms(z, y, mu0, 0.5, 0.1)
    (grad,) = torch.autograd.grad(l_dis, z)
    ref = finite_difference(
        lambda v: np_dis(np_ema(v, y.numpy(), mu0.numpy(), 0.5), 0.1), z.detach().numpy()
    )
    assert np.abs(ref).max() > 1e-2
    np.testing.assert_allclose(grad.numpy(), ref, atol=1e-7)
    # rows of classes that the batch updates get a gradient; a toolkit that detaches z before the
    # EMA has an L_dis that does not depend on z at all
    detached, _, _ = cider_terms(z.detach(), y, mu0, 0.5, 0.1)
    assert not detached.requires_grad
    assert detached.item() == pytest.approx(l_dis.item(), abs=TOL)


def test_total_gradient_matches_numpy_with_detached_compactness_prototypes(inputs):
    z, mu0 = inputs
    y = view_labels("mixed")
    z = z.clone().requires_grad_(True)
    loss, updated = cider(z, y, mu0, 0.95, 0.1, 2.0)
    loss.backward()
    fixed = updated.numpy()  # L_comp sees the updated prototypes as constants

    def ref(v):
        return np_cider(v, y.numpy(), mu0.numpy(), 0.95, 0.1, 2.0, comp_mu=fixed)

    np.testing.assert_allclose(
        z.grad.numpy(), finite_difference(ref, z.detach().numpy()), atol=1e-7
    )


@pytest.mark.parametrize("comp_scale", [False, True])
def test_gradcheck_float64(comp_scale):
    # the full loss is not the gradient of a function of z (L_comp detaches prototypes that
    # depend on z), so check L_dis alone, and the full loss with α = 1 (prototypes constant)
    z = unit(6, 3, seed=2).requires_grad_(True)
    mu0 = unit(3, 3, seed=3)
    y = torch.tensor([0, 2, 2, 0, 2, 2])

    def dis(v):
        return cider_terms(v, y, mu0, 0.7, 0.2)[0]

    def full(v):
        return cider(v, y, mu0, 1.0, 0.2, 1.5, comp_scale=comp_scale)[0]

    assert torch.autograd.gradcheck(dis, (z,))
    assert torch.autograd.gradcheck(full, (z,))


def test_float32_and_half_inputs(inputs):
    z, mu0 = inputs
    y = view_labels("mixed")
    loss32, _ = cider(z.float(), y, mu0.float(), 0.95, 0.1, 2.0)
    assert loss32.dtype == torch.float32
    assert loss32.item() == pytest.approx(cider(z, y, mu0, 0.95, 0.1, 2.0)[0].item(), rel=1e-5)
    assert cider(z.bfloat16(), y, mu0, 0.95, 0.1, 2.0)[0].dtype == torch.float32


def test_errors_are_clear(inputs):
    z, mu0 = inputs
    y = view_labels("mixed")
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 4\)"):
        cider(z, torch.where(y == 3, 4, y), mu0, 0.9, 0.1, 1.0)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 4\)"):
        cider(z, torch.where(y == 3, -1, y), mu0, 0.9, 0.1, 1.0)
    with pytest.raises(ValueError, match="at least 2 classes"):
        cider(z, torch.zeros_like(y), mu0[:1], 0.9, 0.1, 1.0)
    with pytest.raises(ValueError, match="alpha"):
        cider(z, y, mu0, 1.5, 0.1, 1.0)
    with pytest.raises(ValueError, match="labels must have shape"):
        cider(z, y[:N], mu0, 0.9, 0.1, 1.0)
    with pytest.raises(ValueError, match="long tensor"):
        cider(z, y.float(), mu0, 0.9, 0.1, 1.0)
