"""Debiased, hard and decoupled contrastive losses against numpy re-derivations of the authors'
code: chingyaoc/DCL ``main.py`` (debiased), joshr17/HCL ``image/main.py`` (hard), lightly's
DCL/DCLW losses (decoupled), in the papers' 2N x 2N layout and in MoCo's layout."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from negatives.base import ExtraNegatives
from negmine_core.conventions import NO_LABEL
from pretrain import losses
from pretrain.losses import reweighted
from tests.helpers import multiview
from tests.helpers.fd_grad import assert_grad_matches_fd, autograd
from tests.helpers.vectors import unit


def np_pairs(z: np.ndarray, t: float):
    """The DCL/HCL code's pos (2B,) and neg (2B, 2B-2) as exp(sim / t)."""
    b = len(z) // 2
    sim = np.exp(z @ z.T / t)
    mask = np.ones((2 * b, 2 * b), bool)
    for i in range(b):
        mask[i, i] = mask[i, i + b] = mask[i + b, i + b] = mask[i + b, i] = False
    neg = sim[mask].reshape(2 * b, -1)
    pos = np.exp(np.sum(z[:b] * z[b:], axis=1) / t)
    return np.concatenate([pos, pos]), neg


def np_estimator(pos, neg, t, tau_plus, beta=None):
    """The official Ng (debiased when beta is None, else HCL's reweighting) and the loss."""
    n = neg.shape[1]
    if beta is None:
        ng = (-tau_plus * n * pos + neg.sum(-1)) / (1 - tau_plus)
    else:
        imp = np.exp(beta * np.log(neg))
        reweight = (imp * neg).sum(-1) / imp.mean(-1)
        ng = (-tau_plus * n * pos + reweight) / (1 - tau_plus)
    ng = np.maximum(ng, n * np.e ** (-1 / t))
    return float(np.mean(-np.log(pos / (pos + ng))))


def np_decoupled(z: np.ndarray, t: float, sigma=None, split=False):
    """DCL / DCLW in both directions, averaged (= the mean over 2B anchors). ``split=False``:
    eq. 6 of Yeh et al., one log-sum-exp over both views' 2B - 2 others; ``split=True``: lightly's
    ``DCLLoss._loss`` (log-sum-exp of sim_00 off the diagonal + of sim_01 off the diagonal)."""
    b = len(z) // 2
    total = 0.0
    for a, c in ((z[:b], z[b:]), (z[b:], z[:b])):
        s_aa, s_ac = a @ a.T / t, a @ c.T / t
        pos = -np.diag(s_ac)
        if sigma is not None:
            sim = np.sum(a * c, axis=1) / sigma
            pos = pos * (2 - b * np.exp(sim) / np.exp(sim).sum())
        off = ~np.eye(b, dtype=bool)
        e_aa, e_ac = np.exp(s_aa[off].reshape(b, -1)), np.exp(s_ac[off].reshape(b, -1))
        if split:
            neg = np.log(e_aa.sum(1)) + np.log(e_ac.sum(1))
        else:
            neg = np.log(e_aa.sum(1) + e_ac.sum(1))
        total += np.mean(pos + neg)
    return total / 2


@pytest.mark.parametrize("t", [0.5, 0.2])
@pytest.mark.parametrize("tau_plus", [0.0, 0.1, 0.3])
def test_debiased_and_hard_match_the_authors_code(t, tau_plus):
    """Value, and gradient wrt z against central differences of the numpy transcription (the
    official code differentiates through HCL's importance weights, and so do we)."""
    z = unit(16, 8, seed=1)
    pos, neg = np_pairs(z.numpy(), t)
    assert float(multiview.debiased(z, t, tau_plus)) == pytest.approx(
        np_estimator(pos, neg, t, tau_plus), rel=1e-10
    )
    (g,) = autograd(lambda x: multiview.debiased(x, t, tau_plus), z)
    assert_grad_matches_fd(g, lambda x: np_estimator(*np_pairs(x, t), t, tau_plus), z.numpy())
    for beta in (0.5, 1.0, 2.0):
        assert float(multiview.hard(z, t, tau_plus, beta)) == pytest.approx(
            np_estimator(pos, neg, t, tau_plus, beta), rel=1e-10
        )
        (g,) = autograd(lambda x, b=beta: multiview.hard(x, t, tau_plus, b), z)
        assert_grad_matches_fd(
            g, lambda x, b=beta: np_estimator(*np_pairs(x, t), t, tau_plus, b), z.numpy()
        )


def test_the_floor_binds_and_reductions_hold():
    """A large tau_plus drives Ng below M e^{-1/T}: the floor (the code's clamp) binds. beta = 0
    is debiased; debiased at tau_plus = 0 is NT-Xent."""
    z = unit(12, 4, seed=2)
    pos, neg = np_pairs(z.numpy(), 0.5)
    assert float(multiview.debiased(z, 0.5, 0.9)) == pytest.approx(
        np_estimator(pos, neg, 0.5, 0.9), rel=1e-10
    )
    (g,) = autograd(lambda x: multiview.debiased(x, 0.5, 0.9), z)
    assert_grad_matches_fd(g, lambda x: np_estimator(*np_pairs(x, 0.5), 0.5, 0.9), z.numpy())
    assert float(multiview.hard(z, 0.5, 0.1, 0.0)) == pytest.approx(
        float(multiview.debiased(z, 0.5, 0.1)), rel=1e-12
    )
    # tau_plus = 0: Ng = the sum over the 2N - 2 negatives, so the loss is NT-Xent (the floor
    # M e^{-1/T} cannot bind: every e^{s/T} >= e^{-1/T})
    assert float(multiview.debiased(z, 0.5, 0.0)) == pytest.approx(
        float(multiview.nt_xent(z, 0.5)), rel=1e-12
    )
    logits = torch.tensor([[2.0, -50.0, -60.0]], dtype=torch.float64)
    floor = float(reweighted.log_negative_mass(logits[:, 0], logits[:, 1:], 0.5, 0.5)[0])
    assert floor == pytest.approx(np.log(2) - 2.0)  # log(M e^{-1/T}), M = 2, T = 0.5


def np_softmax_rows(s: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Row softmax of ``s`` over the entries where ``mask`` is True (0 elsewhere)."""
    e = np.where(mask, np.exp(s - s.max(1, keepdims=True)), 0.0)
    return e / e.sum(1, keepdims=True)


def np_decoupled_grad(z: np.ndarray, t: float, sigma=None, split=False) -> np.ndarray:
    """d loss / d z of :func:`np_decoupled`, derived by hand, the weights w held constant (as
    lightly computes them, from ``out0.detach()``, ``out1.detach()``). Per direction (anchors A,
    others C, b pairs): L = (1/b) Σ_i [−w_i a_i·c_i/t + negative term]; P (same view) and R (other
    view) are the negatives' softmax weights: jointly normalised for eq. 6, each group on its own
    for lightly's split; then dL/dA = (−w C + (P + Pᵀ) A + R C) / (t b) and
    dL/dC = (−w A + Rᵀ A) / (t b). The loss is the mean of the two directions."""
    b = len(z) // 2
    off = ~np.eye(b, dtype=bool)
    grad = np.zeros_like(z)
    for first in (True, False):
        a, c = (z[:b], z[b:]) if first else (z[b:], z[:b])
        w = np.ones(b)
        if sigma is not None:
            sim = np.sum(a * c, axis=1) / sigma
            w = 2 - b * np.exp(sim) / np.exp(sim).sum()
        if split:
            p = np_softmax_rows(a @ a.T / t, off)  # over the same view's others
            r = np_softmax_rows(a @ c.T / t, off)  # over the other view's others
        else:
            both = np_softmax_rows(np.hstack([a @ a.T, a @ c.T]) / t, np.hstack([off, off]))
            p, r = both[:, :b], both[:, b:]
        ga = (-w[:, None] * c + (p + p.T) @ a + r @ c) / (t * b)
        gc = (-w[:, None] * a + r.T @ a) / (t * b)
        grad[:b] += 0.5 * (ga if first else gc)
        grad[b:] += 0.5 * (gc if first else ga)
    return grad


def torch_dclw_formula(z: torch.Tensor, t: float, sigma: float, split: bool) -> torch.Tensor:
    """DCLW transcribed in torch (lightly's layout) with the weights NOT detached
    (``weight_grad``'s reference: autograd through the formula)."""
    b = len(z) // 2
    off = ~torch.eye(b, dtype=torch.bool)
    total = z.new_zeros(())
    for a, c in ((z[:b], z[b:]), (z[b:], z[:b])):
        w = 2 - b * torch.softmax((a * c).sum(1) / sigma, dim=0)
        pos = -w * (a * c).sum(1) / t
        neg_aa = (a @ a.T / t)[off].view(b, -1)
        neg_ac = (a @ c.T / t)[off].view(b, -1)
        if split:
            neg = neg_aa.logsumexp(1) + neg_ac.logsumexp(1)
        else:
            neg = torch.cat([neg_aa, neg_ac], dim=1).logsumexp(1)
        total = total + (pos + neg).mean()
    return total / 2


@pytest.mark.parametrize("split", [False, True], ids=["eq6", "lightly_split"])
@pytest.mark.parametrize("sigma", [None, 0.5, 0.2])
@pytest.mark.parametrize("t", [0.1, 0.5])
def test_decoupled_matches_eq6_and_lightlys_dcl_and_dclw(t, sigma, split):
    """Value and gradient against the hand-derived reference: DCLW's weights are constants by
    default, as lightly's; ``split_negatives`` is lightly's two log-sum-exps."""
    z = unit(10, 6, seed=3).requires_grad_()
    got = multiview.decoupled(z, t, sigma, split_negatives=split)
    zn = z.detach().numpy()
    assert float(got.detach()) == pytest.approx(np_decoupled(zn, t, sigma, split), rel=1e-10)
    (g,) = torch.autograd.grad(got, z)
    want = np_decoupled_grad(zn, t, sigma, split)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-9, atol=1e-12)


def test_hand_gradient_is_the_finite_difference_of_the_value():
    """The reference gradient checks itself against central differences of the reference value."""
    zn = unit(6, 4, seed=9).numpy()
    for split in (False, True):
        fd = np.zeros_like(zn)
        for idx in np.ndindex(*zn.shape):
            hi, lo = zn.copy(), zn.copy()
            hi[idx] += 1e-6
            lo[idx] -= 1e-6
            diff = np_decoupled(hi, 0.5, None, split) - np_decoupled(lo, 0.5, None, split)
            fd[idx] = diff / 2e-6
        np.testing.assert_allclose(np_decoupled_grad(zn, 0.5, None, split), fd, atol=1e-7)


def test_eq6_and_lightlys_split_are_different_losses():
    z = unit(10, 6, seed=3)
    assert abs(float(multiview.decoupled(z, 0.5)) - np_decoupled(z.numpy(), 0.5, split=True)) > 0.1
    with pytest.raises(ValueError, match="N >= 2"):
        multiview.decoupled(unit(2, 6, seed=3), 0.5, split_negatives=True)


@pytest.mark.parametrize("split", [False, True], ids=["eq6", "lightly_split"])
@pytest.mark.parametrize("sigma", [0.5, 0.2])
@pytest.mark.parametrize("t", [0.1, 0.5])
def test_decoupled_weight_grad_differentiates_through_the_weights(t, sigma, split):
    """``weight_grad=True``: the same value, the gradient of autograd through the formula, and a
    gradient that differs from the constant-weight one (the weights' own term)."""
    z = unit(10, 6, seed=4).requires_grad_()
    got = multiview.decoupled(z, t, sigma, weight_grad=True, split_negatives=split)
    want = torch_dclw_formula(z, t, sigma, split)
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-12)
    (g,) = torch.autograd.grad(got, z)
    (g_want,) = torch.autograd.grad(want, z)
    torch.testing.assert_close(g, g_want, rtol=1e-10, atol=1e-12)
    constant = np_decoupled_grad(z.detach().numpy(), t, sigma, split)
    assert np.abs(g.numpy() - constant).max() > 1e-3


def moco_dclw_grad(q: np.ndarray, k: np.ndarray, negs: np.ndarray, t: float, sigma: float):
    """d loss / d q of DCLW in MoCo's layout, by hand, the weights constant:
    L = (1/N) Σ_i [−w_i q_i·k_i/t + LSE_j q_i·n_j/t] (k and the negatives carry no gradient)."""
    n = len(q)
    sim = np.sum(q * k, 1) / sigma
    w = 2 - n * np.exp(sim) / np.exp(sim).sum()
    p = np_softmax_rows(q @ negs.T / t, np.ones((n, len(negs)), bool))
    return (-w[:, None] * k + p @ negs) / (t * n)


def test_small_temperature_stays_finite_with_finite_gradients():
    z = unit(8, 4, seed=4).requires_grad_()
    for loss in (multiview.debiased(z, 0.005, 0.1), multiview.hard(z, 0.005, 0.1, 1.0)):
        (g,) = torch.autograd.grad(loss, z)
        assert torch.isfinite(loss) and torch.isfinite(g).all()


def moco_step(n=6, k=20, d=8, labels=True):
    q = unit(n, d, seed=5).requires_grad_()
    key = F.normalize(q.detach() + 0.5 * unit(n, d, seed=6), dim=1)
    y = torch.arange(n) % 3 if labels else torch.full((n,), NO_LABEL)
    qy = torch.arange(k) % 4 - 1  # some unknown (-1) queue labels
    return losses.Step.single(q, key, queue=unit(k, d, seed=7), labels=y, queue_labels=qy,
                                     extra=ExtraNegatives(shared=unit(3, d, seed=8)))  # fmt: skip


@pytest.mark.parametrize("name", ["debiased", "hard", "decoupled"])
def test_moco_layout_is_the_estimator_on_own_key_queue_and_extras(name):
    s = moco_step()
    t, kw = 0.2, {"hard": {"beta": 1.0}, "decoupled": {"sigma": 0.5}}.get(name, {})
    loss_fn = losses.create(name, temperature=t, **kw)
    got = float(loss_fn(s).detach())
    q, k = s.emb.q.detach().numpy(), s.emb.k.numpy()
    negs = np.concatenate([s.queue.numpy(), s.extra.shared.numpy()])
    pos = np.exp(np.sum(q * k, 1) / t)
    neg = np.exp(q @ negs.T / t)
    if name == "decoupled":
        w = 2 - len(q) * np.exp(np.sum(q * k, 1) / 0.5) / np.exp(np.sum(q * k, 1) / 0.5).sum()
        want = float(np.mean(-w * np.log(pos) + np.log(neg.sum(1))))
    else:
        want = np_estimator(pos, neg, t, 0.1, 1.0 if name == "hard" else None)
    assert got == pytest.approx(want, rel=1e-6)
    (g,) = torch.autograd.grad(loss_fn(s), s.emb.q)
    if name == "decoupled":
        g_want = moco_dclw_grad(q, k, negs, t, 0.5)
    else:  # the official estimator's gradient, by autograd through a torch transcription
        qt = torch.tensor(q, requires_grad=True)
        pos_t = torch.exp((qt * s.emb.k).sum(1) / t)
        neg_t = torch.exp(qt @ torch.cat([s.queue, s.extra.shared]).T / t)
        m = neg_t.shape[1]
        if name == "hard":
            imp = neg_t.pow(1.0)
            neg_sum = (imp * neg_t).sum(-1) / imp.mean(-1)
        else:
            neg_sum = neg_t.sum(-1)
        ng = torch.clamp((-0.1 * m * pos_t + neg_sum) / 0.9, min=m * np.e ** (-1 / t))
        (g_want,) = torch.autograd.grad(-torch.log(pos_t / (pos_t + ng)).mean(), qt)
        g_want = g_want.numpy()
    np.testing.assert_allclose(g.numpy(), g_want, rtol=1e-9, atol=1e-12)
    diag = loss_fn.diagnostics()
    m = negs.shape[0]
    if name == "hard":
        w = np.exp(1.0 * q @ negs.T / t)
        w = w / w.mean(1, keepdims=True)
        eff = float(np.mean(w.sum(1) ** 2 / (w**2).sum(1)))
    else:
        w, eff = np.ones((len(q), m)), float(m)
    assert float(diag["effective_negatives"]) == pytest.approx(eff, rel=1e-5)
    ny = np.concatenate([s.queue_labels.numpy(), np.full(3, NO_LABEL)])
    y = s.labels.numpy()
    same = (ny[None] == y[:, None]) & (y[:, None] >= 0)
    assert float(diag["false_negative_fraction"]) == pytest.approx(
        float(np.mean((w * same).sum(1) / w.sum(1))), rel=1e-5
    )


def test_moco_layout_dclw_weight_grad_is_autograd_through_the_formula():
    """MoCo's layout with ``weight_grad``: the loss of autograd through w = 2 − N softmax(q·k/σ)
    (k, the queue and the extras constant), the same value as the default, another gradient."""
    s = moco_step()
    t, sigma = 0.2, 0.5
    default = losses.create("decoupled", temperature=t, sigma=sigma)
    through = losses.create("decoupled", temperature=t, sigma=sigma, weight_grad=True)
    qt = s.emb.q.detach().clone().requires_grad_()
    negs = torch.cat([s.queue, s.extra.shared])
    w = 2 - len(qt) * torch.softmax((qt * s.emb.k).sum(1) / sigma, dim=0)
    ref = (-w * (qt * s.emb.k).sum(1) / t + (qt @ negs.T / t).logsumexp(1)).mean()
    (g_ref,) = torch.autograd.grad(ref, qt)
    got = through(s)
    assert float(got.detach()) == pytest.approx(float(ref.detach()), rel=1e-12)
    assert float(default(s).detach()) == pytest.approx(float(ref.detach()), rel=1e-12)
    (g,) = torch.autograd.grad(got, s.emb.q)
    torch.testing.assert_close(g, g_ref, rtol=1e-10, atol=1e-12)
    (g_const,) = torch.autograd.grad(default(s), s.emb.q)
    assert (g - g_const).abs().max() > 1e-3
    with pytest.raises(ValueError, match="weight_grad needs sigma"):
        losses.create("decoupled", temperature=t, weight_grad=True)
    with pytest.raises(ValueError, match="weight_grad must be true or false"):
        losses.create("decoupled", temperature=t, sigma=sigma, weight_grad="yes")


def test_bad_settings_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="tau_plus must lie in"):
        losses.create("debiased", temperature=0.2, tau_plus=1.0)
    with pytest.raises(ValueError, match="beta must be"):
        losses.create("hard", temperature=0.2, beta=-1.0)
    with pytest.raises(ValueError, match="sigma must be positive"):
        losses.create("decoupled", temperature=0.2, sigma=0.0)


@pytest.mark.parametrize("epochs", [27, 100, 400])
def test_hard_beta_anneal_down_follows_the_official_loop(epochs):
    """joshr17/HCL image/main.py: betas = iter(linspace(beta, 0, 9)); after epoch e (1-based) with
    e % int(epochs / 9) == 0, beta = next(betas) (held at 0 once the 9 values are used)."""
    from pretrain.losses.hard import annealed_beta

    betas, beta, used = iter(np.linspace(1.0, 0.0, 9)), 1.0, []
    for epoch in range(1, epochs + 1):
        used.append(beta)  # the beta epoch `epoch` trains with
        if epoch % int(epochs / 9) == 0:
            beta = next(betas, 0.0)
    ours = [annealed_beta(1.0, "down", e + 0.5, epochs) for e in range(epochs)]
    assert ours == pytest.approx(used)
    hard = losses.create("hard", temperature=0.1, anneal="down", epochs=epochs)
    q, k, queue = unit(4, 8, seed=0), unit(4, 8, seed=1), unit(16, 8, seed=2)
    hard(losses.Step.single(q, k, queue=queue, epoch=epochs - 0.5))
    assert hard.beta == pytest.approx(used[-1])


def test_floored_fraction_counts_the_rows_at_the_official_clamp():
    """Rows whose (Σ e^{s_j} − τ⁺ M e^{s_p}) / (1 − τ⁺) falls below M e^{-1/T} (the official
    clamp) pass no gradient from their negatives: a high positive logit at small T does that."""
    t, tau = 0.1, 0.1
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(40, 1 + 64, generator=g, dtype=torch.float64)
    logits[:20, 0] += 8.0  # 20 rows with a dominant positive
    pos, neg = logits[:, 0].exp().numpy(), logits[:, 1:].exp().numpy()
    m = neg.shape[1]
    ng = (-tau * m * pos + neg.sum(1)) / (1 - tau)
    want = np.mean(ng <= m * np.exp(-1 / t))
    got = reweighted.floored_fraction(logits, t, tau).item()
    assert got == pytest.approx(want) and 0 < got < 1
