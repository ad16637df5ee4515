"""MoCo logits and InfoNCE against a numpy re-derivation of Eq. 1 of He et al. (2020).

Reference (moco/builder.py + main_moco.py): l_pos = q·k (N, 1), l_neg = q·queueᵀ (N, K),
logits = [l_pos, l_neg, extras] / T, loss = mean_n cross_entropy(logits_n, target 0).
The gradient with respect to q (the only input that carries gradient) is derived by hand in numpy
(``np_grad_q``), itself checked against central differences of the numpy loss.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pretrain.losses import info_nce, moco_logits
from tests.helpers.fd_grad import assert_grad_matches_fd
from tests.helpers.moco_loss import InfoNCE
from tests.helpers.vectors import unit

N, D, K, M, S = 8, 16, 32, 5, 3
T = 0.2


def np_logits(q, k, queue, t, shared=None, per_query=None):
    cols = [np.sum(q * k, axis=1, keepdims=True), q @ queue.T]
    if shared is not None:
        cols.append(q @ shared.T)
    if per_query is not None:
        cols.append(np.stack([per_query[n] @ q[n] for n in range(q.shape[0])]))
    return np.concatenate(cols, axis=1) / t


def np_info_nce(logits):
    mx = logits.max(axis=1, keepdims=True)
    lse = mx[:, 0] + np.log(np.exp(logits - mx).sum(axis=1))
    return float(np.mean(lse - logits[:, 0]))


def np_grad_q(q, k, queue, t, shared=None, per_query=None):
    """dL/dq = (1/(N T)) Σ_j (softmax_j − [j = 0]) v_j, v_j the vector behind logit column j."""
    logits = np_logits(q, k, queue, t, shared, per_query)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[:, 0] -= 1.0
    n = q.shape[0]
    grad = p[:, :1] * k + p[:, 1 : 1 + len(queue)] @ queue
    col = 1 + len(queue)
    if shared is not None:
        grad += p[:, col : col + len(shared)] @ shared
        col += len(shared)
    if per_query is not None:
        grad += np.einsum("ns,nsd->nd", p[:, col:], per_query)
    return grad / (n * t)


@pytest.fixture
def tensors():
    return {
        "q": unit(N, D, seed=1),
        "k": unit(N, D, seed=2),
        "queue": unit(K, D, seed=3),
        "shared": unit(M, D, seed=4),
        "per_query": unit(N, S, D, seed=5),
    }


@pytest.mark.parametrize(
    "use_shared, use_per_query", [(False, False), (True, False), (False, True), (True, True)]
)
def test_logits_and_loss_match_numpy(tensors, use_shared, use_per_query):
    shared = tensors["shared"] if use_shared else None
    per_query = tensors["per_query"] if use_per_query else None
    logits = moco_logits(tensors["q"], tensors["k"], tensors["queue"], T, shared, per_query)
    ref = np_logits(
        *(tensors[n].numpy() for n in ("q", "k", "queue")),
        T,
        None if shared is None else shared.numpy(),
        None if per_query is None else per_query.numpy(),
    )
    assert logits.shape == (N, 1 + K + (M if use_shared else 0) + (S if use_per_query else 0))
    np.testing.assert_allclose(logits.numpy(), ref, rtol=1e-12, atol=1e-12)
    q = tensors["q"].clone().requires_grad_(True)
    loss = InfoNCE(T)(q, tensors["k"], tensors["queue"], shared, per_query)
    assert loss.dtype == torch.float64  # float64 stays float64 (test_info_nce_keeps_float64)
    assert loss.item() == pytest.approx(np_info_nce(ref), rel=1e-12)
    loss.backward()
    grad_ref = np_grad_q(
        *(tensors[n].numpy() for n in ("q", "k", "queue")),
        T,
        None if shared is None else shared.numpy(),
        None if per_query is None else per_query.numpy(),
    )
    np.testing.assert_allclose(q.grad.numpy(), grad_ref, rtol=1e-10, atol=1e-13)


def test_info_nce_is_cross_entropy_with_target_zero_by_hand():
    # Two queries, two negatives; hand-computed: -log(e^a / Σ e^x) averaged.
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    row0 = -(2.0 - math.log(math.e**2 + math.e + 1.0))
    row1 = math.log(3.0)
    assert info_nce(logits).item() == pytest.approx((row0 + row1) / 2, rel=1e-6)


def test_empty_extras_give_plain_moco_logits(tensors):
    plain = moco_logits(tensors["q"], tensors["k"], tensors["queue"], T)
    empty = moco_logits(
        tensors["q"],
        tensors["k"],
        tensors["queue"],
        T,
        shared=torch.zeros(0, D, dtype=torch.float64),
        per_query=torch.zeros(N, 0, D, dtype=torch.float64),
    )
    assert torch.equal(plain, empty)


def test_equal_logits_give_log_of_number_of_candidates():
    # Correlated embeddings (lightly's closed form): every logit is 1/T, loss = log(1 + K + M).
    v = F.normalize(torch.ones(1, D, dtype=torch.float64), dim=1)
    q, k = v.expand(N, D), v.expand(N, D)
    loss = InfoNCE(T)(q, k, v.expand(K, D), shared=v.expand(M, D))
    assert loss.item() == pytest.approx(-math.log(1.0 / (K + M + 1)), rel=1e-6)


@pytest.mark.parametrize("use_extras", [False, True])
def test_gradient_wrt_q_matches_numpy(tensors, use_extras):
    q = tensors["q"].clone().requires_grad_(True)
    shared = tensors["shared"] if use_extras else None
    per_query = tensors["per_query"] if use_extras else None
    InfoNCE(T)(q, tensors["k"], tensors["queue"], shared, per_query).backward()
    rest = (
        tensors["k"].numpy(),
        tensors["queue"].numpy(),
        T,
        None if shared is None else shared.numpy(),
        None if per_query is None else per_query.numpy(),
    )
    ref = np_grad_q(tensors["q"].numpy(), *rest)
    np.testing.assert_allclose(q.grad.numpy(), ref, rtol=1e-10, atol=1e-13)
    # the hand gradient is the derivative of the numpy loss (central differences)
    assert_grad_matches_fd(ref, lambda v: np_info_nce(np_logits(v, *rest)), tensors["q"].numpy())


def test_moco_logits_gradcheck_float64(tensors):
    w = unit(N, 1 + K + M + S, seed=6)  # a scalar of every logit keeps gradcheck cheap

    def f(q):
        logits = moco_logits(
            q, tensors["k"], tensors["queue"], T, tensors["shared"], tensors["per_query"]
        )
        return (logits * w).sum()

    assert torch.autograd.gradcheck(f, (tensors["q"].clone().requires_grad_(True),))


def test_info_nce_keeps_float64(tensors):
    """float64 inputs give a float64 loss whose gradient passes gradcheck (only bf16/fp16 are
    upcast, to float32)."""

    def f(q):
        return InfoNCE(T)(q, tensors["k"], tensors["queue"], tensors["shared"])

    q = tensors["q"].clone().requires_grad_(True)
    assert f(q).dtype == torch.float64
    assert torch.autograd.gradcheck(f, (q,))


def test_info_nce_upcasts_half_precision(tensors):
    logits = moco_logits(tensors["q"], tensors["k"], tensors["queue"], T).bfloat16()
    ref = np_info_nce(logits.double().numpy())
    loss = info_nce(logits)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(ref, rel=1e-6)


def test_no_gradient_reaches_queue_or_extras(tensors):
    q = tensors["q"].clone().requires_grad_(True)
    queue = tensors["queue"].clone().requires_grad_(True)
    shared = tensors["shared"].clone().requires_grad_(True)
    per_query = tensors["per_query"].clone().requires_grad_(True)
    InfoNCE(T)(q, tensors["k"], queue, shared, per_query).backward()
    assert q.grad is not None
    assert queue.grad is None
    assert shared.grad is None
    assert per_query.grad is None


@pytest.mark.parametrize("t", [1e-3, 0.0, -0.1])
def test_temperature_must_exceed_1e_3(t):
    with pytest.raises(ValueError, match="temperature must be above 1e-3"):
        InfoNCE(t)


def test_temperature_just_above_limit_is_accepted(tensors):
    q = tensors["q"].clone().requires_grad_(True)
    loss = InfoNCE(2e-3)(q, tensors["k"], tensors["queue"])
    inputs = [tensors[n].numpy() for n in ("q", "k", "queue")]
    ref = np_info_nce(np_logits(*inputs, 2e-3))
    assert loss.item() == pytest.approx(ref, rel=1e-12)
    loss.backward()
    np.testing.assert_allclose(q.grad.numpy(), np_grad_q(*inputs, 2e-3), rtol=1e-10, atol=1e-10)
