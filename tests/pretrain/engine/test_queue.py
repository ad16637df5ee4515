"""The labelled MoCo queue against a pure-python FIFO reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pretrain.model.queue import NO_LABEL, LabeledQueue
from tests.helpers.moco_loss import InfoNCE

K, D = 32, 16


class ReferenceFifo:
    """A ring buffer written one key at a time, oldest slot first (MoCo's dequeue-and-enqueue)."""

    def __init__(self, keys: np.ndarray, labels: np.ndarray) -> None:
        self.keys, self.labels, self.ptr = keys.copy(), labels.copy(), 0

    def enqueue(self, keys: np.ndarray, labels: np.ndarray) -> None:
        for key, label in zip(keys, labels):
            self.keys[self.ptr] = key
            self.labels[self.ptr] = label
            self.ptr = (self.ptr + 1) % len(self.keys)


def test_initial_state_is_unit_norm_unlabelled_and_at_zero():
    torch.manual_seed(0)
    queue = LabeledQueue(K, D)
    norms = np.linalg.norm(queue.keys.double().numpy(), axis=1)
    np.testing.assert_allclose(norms, np.ones(K), rtol=0, atol=1e-6)
    assert queue.keys.shape == (K, D)
    assert (queue.labels.numpy() == NO_LABEL).all()
    assert int(queue.ptr) == 0
    assert queue.size == K
    # Registered buffers: they travel in state_dict (and so in checkpoints).
    assert set(queue.state_dict()) == {"keys", "labels", "ptr"}


@pytest.mark.parametrize("sizes", [[8, 8, 8, 8, 8, 8], [5, 7, 13, 3, 11, 9, 1, 32]])
def test_fifo_order_and_wrap_around_match_reference(sizes):
    torch.manual_seed(0)
    queue = LabeledQueue(K, D)
    ref = ReferenceFifo(queue.keys.numpy(), queue.labels.numpy())
    rng = np.random.default_rng(0)
    next_label = 0
    for b in sizes:
        keys = rng.standard_normal((b, D)).astype(np.float32)
        labels = np.arange(next_label, next_label + b)
        next_label += b
        queue.enqueue(torch.from_numpy(keys), torch.from_numpy(labels))
        ref.enqueue(keys, labels)
        np.testing.assert_array_equal(queue.keys.numpy(), ref.keys)
        np.testing.assert_array_equal(queue.labels.numpy(), ref.labels)
        assert int(queue.ptr) == ref.ptr


def test_batch_absent_before_and_present_after_with_its_labels():
    torch.manual_seed(0)
    queue = LabeledQueue(K, D)
    queue.enqueue(F.normalize(torch.randn(20, D), dim=1), torch.arange(20))
    batch = F.normalize(torch.randn(20, D), dim=1)  # wraps: slots 20..31 then 0..7
    labels = torch.arange(100, 120)

    def rows_of(keys: torch.Tensor) -> set[tuple[float, ...]]:
        return {tuple(r) for r in keys.tolist()}

    assert not rows_of(batch) & rows_of(queue.keys)
    queue.enqueue(batch, labels)
    assert rows_of(batch) <= rows_of(queue.keys)
    slots = [(20 + i) % K for i in range(20)]
    np.testing.assert_array_equal(queue.keys[slots].numpy(), batch.numpy())
    np.testing.assert_array_equal(queue.labels[slots].numpy(), labels.numpy())
    # The 12 keys of the first batch that were not overwritten are still there, labels 8..19.
    np.testing.assert_array_equal(queue.labels[8:20].numpy(), np.arange(8, 20))


def test_enqueue_without_labels_stores_no_label():
    queue = LabeledQueue(K, D)
    queue.enqueue(torch.randn(4, D), torch.arange(4))
    queue.enqueue(torch.randn(3, D))
    np.testing.assert_array_equal(queue.labels[:7].numpy(), [0, 1, 2, 3, -1, -1, -1])


def test_enqueue_casts_and_detaches_keys():
    queue = LabeledQueue(K, D)
    keys = torch.randn(4, D, dtype=torch.float64, requires_grad=True)
    queue.enqueue(keys * 1.0)
    assert queue.keys.dtype == torch.float32
    assert not queue.keys.requires_grad
    np.testing.assert_array_equal(queue.keys[:4].numpy(), keys.detach().float().numpy())


def test_check_batch_refuses_a_batch_larger_than_the_queue():
    queue = LabeledQueue(K, D)
    queue.check_batch(K)  # equal is fine
    with pytest.raises(
        ValueError, match=r"moco.queue_size \(32\) is smaller than the global batch \(33\)"
    ):
        queue.check_batch(K + 1)
    with pytest.raises(ValueError, match="cannot enqueue 33 keys into a queue of 32"):
        queue.enqueue(torch.randn(K + 1, D))


@pytest.mark.parametrize("size, dim", [(0, 4), (4, 0), (-1, 4)])
def test_non_positive_sizes_are_refused(size, dim):
    with pytest.raises(ValueError, match="queue size and dim must be positive"):
        LabeledQueue(size, dim)


def test_engine_order_backward_then_enqueue_uses_the_pre_enqueue_queue():
    """pretrain/engine/step.py enqueues after ``loss.backward()`` and ``optimizer.step()``.

    The loss reads ``queue.keys`` without a clone, so the enqueue must come after backward (MoCo's
    reference enqueues before backward and needs ``queue.clone()`` for that). This mirrors the
    engine's order and checks the gradient against a numpy InfoNCE gradient built from the queue
    *before* the enqueue.
    """
    torch.manual_seed(0)
    n, t = 8, 0.2
    queue = LabeledQueue(K, D)
    old_queue = queue.keys.double().numpy().copy()
    q = F.normalize(torch.randn(n, D), dim=1).requires_grad_(True)
    k = F.normalize(torch.randn(n, D), dim=1)
    loss = InfoNCE(t)(q, k, queue.keys)
    loss.backward()
    queue.enqueue(k, torch.arange(n))

    qn, kn = q.detach().double().numpy(), k.double().numpy()
    logits = np.concatenate([(qn * kn).sum(1, keepdims=True), qn @ old_queue.T], axis=1) / t
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[:, 0] -= 1.0
    grad = (p[:, :1] * kn + p[:, 1:] @ old_queue) / (n * t)
    np.testing.assert_allclose(q.grad.double().numpy(), grad, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(queue.keys[:n].numpy(), k.numpy())
