"""Ring (Wu et al. 2021) against a numpy re-derivation of the official ``MoCoRing.get_loss`` and
``src/utils/policy.py`` (mhw32/contrastive-ring-public).

The loss comparisons cover the gradient with respect to q (keys and queue are constants in MoCo's
layout) as well as the value: autograd on ours against central finite differences of the numpy
``MoCoRing.get_loss`` (``fd_grad``). The ring is a hard band of the sorted similarities, so the
loss is not differentiable where a negative crosses a band edge; the tests evaluate at generic
points and assert that every edge gap is far wider than the finite-difference step.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from negatives.base import ExtraNegatives
from pretrain import losses
from pretrain.losses import ring
from pretrain.losses.base import Step
from tests.helpers.fd_grad import EPS, assert_grad_matches_fd, autograd
from tests.helpers.vectors import unit


def np_moco_ring(q, k, queue, t, outer, inner, dynamic_inner=True, self_negative=True):
    """``MoCoRing.get_loss`` of the official code, in numpy."""
    pos = np.sum(q * k, axis=1) / t
    all_dps = q @ queue.T / t
    sorted_dps = -np.sort(-all_dps, axis=1)
    n_k = queue.shape[0]
    if dynamic_inner:
        outer_idx = int(outer * n_k)
        outer_dps = sorted_dps[:, :outer_idx]
        inner_idx = int(inner * outer_dps.shape[1])
        ring_dps = outer_dps[:, inner_idx:]
    else:
        ring_dps = sorted_dps[:, int(inner * n_k) : int(outer * n_k)]
    if self_negative:
        ring_dps = np.concatenate([pos[:, None], ring_dps], axis=1)
    m = ring_dps.max(1, keepdims=True)
    partition = (m + np.log(np.exp(ring_dps - m).sum(1, keepdims=True)))[:, 0]
    return float(-np.mean(pos - partition)), ring_dps.shape[1] - int(self_negative)


def assert_edges_generic(q, queue, t, outer, inner, dynamic=True):
    """The logits on either side of each band edge differ by more than twice what a central
    difference can move them together (2 · EPS · max|queue| / t): the differences see no kink."""
    sorted_dps = -np.sort(-(q @ queue.T / t), axis=1)
    n_k = queue.shape[0]
    hi = int(outer * n_k)
    lo = int(inner * hi) if dynamic else int(inner * n_k)
    gaps = [sorted_dps[:, e - 1] - sorted_dps[:, e] for e in (lo, hi) if 0 < e < n_k]
    if gaps:
        assert np.min(gaps) > 4 * EPS * np.abs(queue).max() / t


def check_ring_gradient(loss_fn, q, k, queue, t, outer, inner, dynamic=True, self_neg=True):
    (grad,) = autograd(lambda v: loss_fn(Step.single(v, k, queue=queue)), q)
    assert_edges_generic(q.numpy(), queue.numpy(), t, outer, inner, dynamic)
    ref = assert_grad_matches_fd(
        grad,
        lambda v: np_moco_ring(v, k.numpy(), queue.numpy(), t, outer, inner, dynamic, self_neg)[0],
        q.numpy(),
    )
    return grad, ref


@pytest.mark.parametrize(
    ("outer", "inner", "dynamic", "self_neg"),
    [
        (0.1, 0.1, True, True),
        (0.3, 0.2, True, False),
        (0.5, 0.1, False, True),
        (1.0, 0.0, True, True),
    ],
)
def test_ring_matches_the_official_moco_ring(outer, inner, dynamic, self_neg):
    q, k, queue = unit(12, 16, seed=0), unit(12, 16, seed=1), unit(200, 16, seed=2)
    loss_fn = losses.create("ring", temperature=0.07, thres_outer=outer, thres_inner=inner,
                            dynamic_inner=dynamic, self_negative=self_neg)  # fmt: skip
    ours = loss_fn(Step.single(q, k, queue=queue))
    ref, band = np_moco_ring(q.numpy(), k.numpy(), queue.numpy(), 0.07, outer, inner, dynamic,
                             self_neg)  # fmt: skip
    assert abs(ours.item() - ref) < 1e-10
    assert loss_fn.diagnostics()["effective_negatives"].item() == band
    check_ring_gradient(loss_fn, q, k, queue, 0.07, outer, inner, dynamic, self_neg)


def test_full_ring_without_inner_is_infonce():
    q, k, queue = unit(8, 16, seed=3), unit(8, 16, seed=4), unit(64, 16, seed=5)
    step = Step.single(q, k, queue=queue)
    full = losses.create("ring", temperature=0.2, thres_outer=1.0, thres_inner=0.0)(step)
    infonce = losses.create("infonce", temperature=0.2)(step)
    assert torch.allclose(full, infonce)


def test_ring_spans_the_extras_and_gets_gradient():
    q = unit(6, 8, seed=6).requires_grad_(True)
    k, queue, shared = unit(6, 8, seed=7), unit(30, 8, seed=8), unit(10, 8, seed=9)
    step = Step.single(q, k, queue=queue, extra=ExtraNegatives(shared=shared))
    loss_fn = losses.create("ring", temperature=0.1, thres_outer=0.5, thres_inner=0.1)
    loss = loss_fn(step)
    both = torch.cat([queue, shared])
    ref, _ = np_moco_ring(q.detach().numpy(), k.numpy(), both.numpy(), 0.1, 0.5, 0.1)
    assert abs(loss.item() - ref) < 1e-10
    loss.backward()
    assert torch.isfinite(q.grad).all() and q.grad.abs().sum() > 0
    assert_edges_generic(q.detach().numpy(), both.numpy(), 0.1, 0.5, 0.1)

    def ours(v):
        return loss_fn(Step.single(v, k, queue=queue, extra=ExtraNegatives(shared=shared)))

    (grad,) = autograd(ours, q)
    assert_grad_matches_fd(
        grad,
        lambda v: np_moco_ring(v, k.numpy(), both.numpy(), 0.1, 0.5, 0.1)[0],
        q.detach().numpy(),
    )


def test_false_negative_fraction_counts_the_ring_members_labels():
    q, k, queue = unit(10, 8, seed=10), unit(10, 8, seed=11), unit(50, 8, seed=12)
    labels = torch.arange(10) % 3
    queue_labels = torch.arange(50) % 3
    loss_fn = losses.create("ring", temperature=0.1, thres_outer=0.4, thres_inner=0.25)
    loss_fn(Step.single(q, k, queue=queue, labels=labels, queue_labels=queue_labels))
    sims = (q @ queue.T).numpy()
    order = np.argsort(-sims, axis=1)[:, 5:20]  # outer 20, inner int(0.25 * 20) = 5
    same = (queue_labels.numpy()[order] == labels.numpy()[:, None]).mean(1)
    diag = loss_fn.diagnostics()
    assert diag["effective_negatives"].item() == 15
    assert abs(diag["false_negative_fraction"].item() - same.mean()) < 1e-6


def test_an_empty_ring_is_refused():
    q, k, queue = unit(4, 8, seed=13), unit(4, 8, seed=14), unit(9, 8, seed=15)
    loss_fn = losses.create("ring", temperature=0.1, thres_outer=0.1, thres_inner=0.1)
    with pytest.raises(ValueError, match="empty"):
        loss_fn(Step.single(q, k, queue=queue))  # int(0.1 * 9) = 0 columns


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="thres_outer"):
        losses.create("ring", temperature=0.1, thres_outer=0.0)
    with pytest.raises(ValueError, match="assertion"):
        losses.create(
            "ring", temperature=0.1, thres_outer=0.1, thres_inner=0.2, dynamic_inner=False
        )
    with pytest.raises(ValueError, match="anneal"):
        losses.create("ring", temperature=0.1, anneal="cosine")


# ---- the official threshold policies (src/utils/policy.py), in numpy


def np_linear(total, max_step, init=1.0, low=0.1):
    return np.concatenate(
        [np.linspace(low, init, max_step)[::-1], np.ones(total - max_step + 1) * low]
    )


def np_step(total, max_step, init=1.0, low=0.1, step_size=0.1):
    schedule = np.arange(low, init + step_size, step_size)[::-1]
    schedule = np.repeat(schedule, int(max_step / len(schedule)))
    return np.concatenate([schedule, np.ones(total - max_step + 1) * low])


def np_exponential(total, max_step, init=1.0, low=0.1, decay=0.1):
    schedule = (init - low) * np.exp(-decay * np.arange(max_step)) + low
    return np.concatenate([schedule, np.ones(total - max_step + 1) * low])


def test_annealing_follows_the_official_policies():
    per_epoch, epochs, anneal_epochs = 50, 30, 20
    total, max_step = epochs * per_epoch, anneal_epochs * per_epoch
    lin, stp, exp = (f(total, max_step) for f in (np_linear, np_step, np_exponential))
    for step in range(0, total, 7):
        epoch = step / per_epoch
        ours = {
            a: ring.outer_threshold(a, 0.1, epoch, step, anneal_epochs)
            for a in ("linear", "step", "exponential", "none")
        }
        # linear: continuous in the epoch, the official linspace has A points: within 1/(A-1)
        assert abs(ours["linear"] - lin[step]) <= 0.9 / (max_step - 1) + 1e-12
        assert ours["step"] == pytest.approx(stp[step], abs=1e-12)
        assert ours["exponential"] == pytest.approx(exp[step], abs=1e-12)
        assert ours["none"] == 0.1


def test_annealed_ring_uses_the_epoch_of_the_step():
    q, k, queue = unit(5, 8, seed=16), unit(5, 8, seed=17), unit(100, 8, seed=18)
    loss_fn = losses.create("ring", temperature=0.1, anneal="linear", max_anneal_epoch=10.0)
    loss_fn(Step.single(q, k, queue=queue, epoch=0.0))
    assert loss_fn.diagnostics()["effective_negatives"].item() == 100 - 10  # outer 1.0
    loss_fn(Step.single(q, k, queue=queue, epoch=5.0))
    assert loss_fn.diagnostics()["effective_negatives"].item() == 55 - 5  # outer 0.55
