"""κ alignment + regulariser (vMF-κ eqs. 10-11, SEMANTICS §5) against numpy.

Reference: L_align = −λ_align · (1/N) Σ_i (κ1_i + κ2_i) μ1_i·μ2_i and
L_reg = λ_reg · ((1/N) Σ_i κ1_i² + (1/N) Σ_i κ2_i²).
The comparison covers the gradients with respect to both views' embeddings μ and both κ (all four
carry gradient) as well as the value: autograd on ours against central finite differences of the
numpy form (``fd_grad``); the seed's appendix form is compared by autograd through its torch code.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pretrain.losses import kappa_alignment, kappa_terms
from tests.helpers.fd_grad import assert_grad_matches_fd, autograd

N, D = 7, 5
LAMBDA_ALIGN, LAMBDA_REG = 0.05, 0.005


def np_terms(mu1, k1, mu2, k2, la, lr):
    align = -la * np.mean([(k1[i] + k2[i]) * np.dot(mu1[i], mu2[i]) for i in range(len(mu1))])
    reg = lr * (np.mean(k1**2) + np.mean(k2**2))
    return align, reg


def seed_code_align(mu1, k1, mu2, k2, la):
    """The seed's appendix-F form: −λ·log(exp((κ1+κ2)cos) + 1e-6), batch mean."""
    cos = (mu1 * mu2).sum(dim=1)
    return -la * torch.log(torch.exp((k1 + k2) * cos) + 1e-6).mean()


@pytest.fixture
def inputs():
    g = torch.Generator().manual_seed(0)
    mu1 = F.normalize(torch.randn(N, D, generator=g, dtype=torch.float64), dim=1)
    mu2 = F.normalize(torch.randn(N, D, generator=g, dtype=torch.float64), dim=1)
    k1 = F.softplus(3 * torch.randn(N, generator=g, dtype=torch.float64))
    k2 = F.softplus(3 * torch.randn(N, generator=g, dtype=torch.float64))
    return mu1, k1, mu2, k2


@pytest.mark.parametrize("column", [False, True])
def test_matches_eqs_10_11(inputs, column):
    mu1, k1, mu2, k2 = inputs
    align_ref, reg_ref = np_terms(mu1.numpy(), k1.numpy(), mu2.numpy(), k2.numpy(), 0.3, 0.7)
    if column:
        k1, k2 = k1.unsqueeze(1), k2.unsqueeze(1)
    l_align, l_reg = kappa_terms(mu1, k1, mu2, k2, 0.3, 0.7)
    assert l_align.item() == pytest.approx(align_ref, abs=1e-12)
    assert l_reg.item() == pytest.approx(reg_ref, abs=1e-12)
    total = kappa_alignment(mu1, k1, mu2, k2, 0.3, 0.7)
    assert total.dtype == torch.float64
    assert total.item() == pytest.approx(align_ref + reg_ref, abs=1e-12)
    args = [x.numpy() for x in (mu1, k1, mu2, k2)]
    grads = autograd(lambda *v: kappa_alignment(*v, 0.3, 0.7), mu1, k1, mu2, k2)
    for i, grad in enumerate(grads):  # one input at a time, the others fixed

        def reference(v, i=i):
            vs = [v if j == i else a for j, a in enumerate(args)]
            vs[1], vs[3] = vs[1].reshape(-1), vs[3].reshape(-1)  # κ as (N,) or (N, 1)
            return sum(np_terms(*vs, 0.3, 0.7))

        assert grad.shape == args[i].shape
        assert_grad_matches_fd(grad, reference, args[i])


def test_seed_code_form_agrees_in_its_safe_range(inputs):
    # |(κ1 + κ2)·cos| stays small here, so the +1e-6 and the exp/log round trip barely matter
    mu1, k1, mu2, k2 = inputs
    ours, _ = kappa_terms(mu1, k1, mu2, k2, LAMBDA_ALIGN, LAMBDA_REG)
    assert ours.item() == pytest.approx(
        seed_code_align(mu1, k1, mu2, k2, LAMBDA_ALIGN).item(), rel=1e-4
    )
    # gradients: d/dx of −λ log(e^x + 1e-6) is −λ e^x / (e^x + 1e-6), eq. 10's −λ times
    # r = e^x / (e^x + 1e-6) per row, x = (κ1 + κ2) cos: the seed's gradient is ours times r
    x = ((k1 + k2) * (mu1 * mu2).sum(dim=1)).numpy()
    r = np.exp(x) / (np.exp(x) + 1e-6)
    assert 1 - r.min() < 1e-5  # the safe range
    grads = autograd(lambda *v: kappa_terms(*v, LAMBDA_ALIGN, LAMBDA_REG)[0], mu1, k1, mu2, k2)
    seed = autograd(lambda *v: seed_code_align(*v, LAMBDA_ALIGN), mu1, k1, mu2, k2)
    for grad, grad_seed in zip(grads, seed):
        assert np.abs(grad_seed).max() > 1e-3
        scaled = grad * r.reshape(-1, *[1] * (grad.ndim - 1))
        np.testing.assert_allclose(scaled, grad_seed, rtol=1e-10, atol=1e-15)


def test_gradcheck_float64(inputs):
    args = tuple(x.clone().requires_grad_(True) for x in inputs)

    def f(mu1, k1, mu2, k2):
        return kappa_alignment(mu1, k1, mu2, k2, LAMBDA_ALIGN, LAMBDA_REG)

    assert torch.autograd.gradcheck(f, args)


@pytest.mark.parametrize("cos", [1.0, -1.0])
def test_large_concentration_is_finite_where_the_exp_log_form_fails(cos):
    # κ1 = κ2 = 200, μ2 = ±μ1: (κ1 + κ2)·cos = ±400
    mu1 = F.normalize(torch.ones(N, D), dim=1)
    mu2 = cos * mu1
    k1 = torch.full((N,), 200.0, requires_grad=True)
    k2 = torch.full((N,), 200.0)
    l_align, _ = kappa_terms(mu1, k1, mu2, k2, LAMBDA_ALIGN, LAMBDA_REG)
    l_align.backward()
    assert l_align.item() == pytest.approx(-LAMBDA_ALIGN * 400.0 * cos, rel=1e-6)
    np.testing.assert_allclose(k1.grad.numpy(), -LAMBDA_ALIGN * cos / N, rtol=1e-6)

    k1_seed = k1.detach().clone().requires_grad_(True)
    seed = seed_code_align(mu1, k1_seed, mu2, k2, LAMBDA_ALIGN)
    seed.backward()
    if cos > 0:  # exp(400) overflows float32: the seed's loss is −inf
        assert not torch.isfinite(seed)
    else:  # exp(−400) = 0: saturated at −λ·log(1e-6) ≈ 13.8λ, zero gradient
        assert seed.item() == pytest.approx(-LAMBDA_ALIGN * np.log(1e-6), rel=1e-5)
        assert seed.item() < 0.1 * l_align.item()
        assert torch.all(k1_seed.grad == 0)


def test_errors_are_clear(inputs):
    mu1, k1, mu2, k2 = inputs
    with pytest.raises(ValueError, match="kappa1 must have shape"):
        kappa_alignment(mu1, k1[:3], mu2, k2, 0.1, 0.1)
    with pytest.raises(ValueError, match="kappa2 must have shape"):
        kappa_alignment(mu1, k1, mu2, k2.reshape(1, N), 0.1, 0.1)
    with pytest.raises(ValueError, match="mu1 and mu2"):
        kappa_alignment(mu1, k1, mu2[:, :3], k2, 0.1, 0.1)
