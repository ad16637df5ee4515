"""Negative-strategy registry and the contract every registered strategy must meet."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import negatives
from negatives import ExtraNegatives, NegativeStrategy
from negatives.none import NoNegatives

N, D, K = 8, 16, 32


def test_registry_lists_none():
    names = negatives.list_strategies()
    assert "none" in names
    assert names == sorted(names)


def test_unknown_name_suggests_the_closest():
    with pytest.raises(
        ValueError, match=r"unknown negative strategy 'nonee' \(did you mean 'none'\?\)"
    ):
        negatives.create("nonee")


def test_unexpected_argument_is_a_value_error():
    with pytest.raises(ValueError, match=r"bad arguments for negative strategy 'none'.*foo"):
        negatives.create("none", foo=1)


def test_none_kwargs_are_dropped():
    strategy = negatives.create("none", foo=None, alpha=None)
    assert type(strategy) is NoNegatives


def test_duplicate_registration_is_refused():
    before = negatives.list_strategies()
    with pytest.raises(ValueError, match="negative strategy 'none' is already registered"):

        @negatives.register("none")
        class Again(NegativeStrategy):
            pass

    assert negatives.list_strategies() == before
    assert type(negatives.create("none")) is NoNegatives


def inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(N, D, generator=g), dim=1)
    k = F.normalize(torch.randn(N, D, generator=g), dim=1)
    queue = F.normalize(torch.randn(K, D, generator=g), dim=1)
    labels = torch.randint(-1, 5, (K,), generator=g)
    return q, k, queue, labels


def check_extra(t: torch.Tensor | None, shape_prefix: tuple[int, ...], ref: torch.Tensor) -> None:
    if t is None:
        return
    assert t.shape[: len(shape_prefix)] == shape_prefix and t.shape[-1] == D
    assert t.dtype == ref.dtype and t.device == ref.device
    assert not t.requires_grad and t.grad_fn is None
    if t.numel():
        norms = t.double().norm(dim=-1)
        torch.testing.assert_close(norms, torch.ones_like(norms), rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", negatives.list_strategies())
def test_negatives_contract(name):
    torch.manual_seed(0)
    strategy = negatives.create(name)
    q, k, queue, labels = inputs(0)
    queue_before, labels_before = queue.clone(), labels.clone()
    # A queue that tracks gradients catches a strategy that forgets to detach what it builds.
    queue.requires_grad_(True)
    extra = strategy.negatives(q, k, queue, labels, epoch=1.5)
    assert isinstance(extra, ExtraNegatives)
    check_extra(extra.shared, (), queue)
    check_extra(extra.per_query, (N,), queue)
    assert extra.per_query is None or extra.per_query.dim() == 3
    assert extra.shared is None or extra.shared.dim() == 2
    # The queue is read-only.
    assert torch.equal(queue, queue_before) and torch.equal(labels, labels_before)


@pytest.mark.parametrize("name", negatives.list_strategies())
def test_negatives_are_seeded_deterministic(name):
    results = []
    for _ in range(2):
        torch.manual_seed(0)
        strategy = negatives.create(name)
        q, k, queue, labels = inputs(1)
        results.append(strategy.negatives(q, k, queue, labels, epoch=0.0))
    for a, b in (
        (results[0].shared, results[1].shared),
        (results[0].per_query, results[1].per_query),
    ):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.equal(a, b)


@pytest.mark.parametrize("name", negatives.list_strategies())
def test_transform_batch_keeps_shapes(name):
    torch.manual_seed(0)
    strategy = negatives.create(name)
    x1, x2 = torch.randn(N, 3, 16, 16), torch.randn(N, 3, 16, 16)
    y = torch.arange(N)
    out1, out2, out_y = strategy.transform_batch(x1, x2, y)
    assert out1.shape == x1.shape and out2.shape == x2.shape and out_y.shape == y.shape
    assert out1.dtype == x1.dtype and out_y.dtype == y.dtype


def test_none_strategy_is_plain_moco():
    strategy = negatives.create("none")
    q, k, queue, labels = inputs(2)
    extra = strategy.negatives(q, k, queue, labels, epoch=0.0)
    assert extra.shared is None and extra.per_query is None
    x1, x2, y = torch.randn(N, 3, 4, 4), torch.randn(N, 3, 4, 4), torch.arange(N)
    out = strategy.transform_batch(x1, x2, y)
    assert out[0] is x1 and out[1] is x2 and out[2] is y
    assert strategy.state_dict() == {}
