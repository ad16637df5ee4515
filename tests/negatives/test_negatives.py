"""Negative-strategy registry and the contract every registered strategy must meet."""

from __future__ import annotations

import inspect
import json

import pytest
import torch
import torch.nn.functional as F

import negatives
from negatives import ExtraNegatives, NegativeStrategy, Step
from negatives.none import NoNegatives
from negmine_core.step import Batch, SetupContext
from pretrain.testing.declarations import check_declarations
from tests.helpers.transforms import applied

N, D, K = 8, 16, 32


def where(name: str, attribute: str) -> str:
    cls = negatives.strategies.get(name)
    return f"strategy {name!r} ({cls.__module__}.{cls.__qualname__}.{attribute})"


def small(name: str) -> NegativeStrategy:
    """The strategy at its contract's sizes (``contract_kwargs``), bound to D."""
    try:
        strategy = negatives.create(name, **negatives.strategies.get(name).contract_kwargs)
    except (TypeError, ValueError) as e:
        raise AssertionError(f"{where(name, 'contract_kwargs')}: {e}") from None
    # what build.strategy does: the embedding size and the training images' size and statistics
    strategy.setup(SetupContext(dim=D, image_size=16, mean=(0.5,) * 3, std=(0.25,) * 3))
    return strategy


@pytest.mark.parametrize("name", negatives.list_strategies())
def test_the_contract_is_declared(name):
    """Fast, before any slow test: the contract kit's declaration check (the flags' types, the
    contract kwargs accepted by the constructor); a failure names the class and attribute."""
    check_declarations(negatives.strategies.get(name))


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


def test_none_kwargs_are_dropped_but_still_checked():
    """A key left empty in YAML takes the class default; a misspelt empty key is still refused."""
    strategy = negatives.create("mochi", num_hard=None, num_mix=3)
    assert strategy.num_mix == 3
    assert strategy.num_hard == inspect.signature(type(strategy)).parameters["num_hard"].default
    with pytest.raises(ValueError, match="no argument 'foo'"):
        negatives.create("none", foo=None)


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
    strategy = small(name)
    q, k, queue, labels = inputs(0)
    queue_before, labels_before = queue.clone(), labels.clone()
    # A queue that tracks gradients catches a strategy that forgets to detach what it builds.
    queue.requires_grad_(True)
    extra = strategy.negatives(Step.single(q=q, k=k, queue=queue, queue_labels=labels, epoch=1.5))
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
        strategy = small(name)
        q, k, queue, labels = inputs(1)
        results.append(
            strategy.negatives(Step.single(q=q, k=k, queue=queue, queue_labels=labels, epoch=0.0))
        )
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
    strategy = small(name)
    x1, x2 = torch.randn(N, 3, 16, 16), torch.randn(N, 3, 16, 16)
    y = torch.arange(N)
    out1, out2, out_y = applied(strategy, x1, x2, y)
    assert out1.shape == x1.shape and out2.shape == x2.shape and out_y.shape == y.shape
    assert out1.dtype == x1.dtype and out_y.dtype == y.dtype


def test_none_strategy_is_plain_moco():
    strategy = negatives.create("none")
    q, k, queue, labels = inputs(2)
    extra = strategy.negatives(Step.single(q=q, k=k, queue=queue, queue_labels=labels, epoch=0.0))
    assert extra.shared is None and extra.per_query is None
    x1, x2, y = torch.randn(N, 3, 4, 4), torch.randn(N, 3, 4, 4), torch.arange(N)
    out = applied(strategy, x1, x2, y)
    assert out[0] is x1 and out[1] is x2 and out[2] is y
    assert strategy.state_dict() == {}


@pytest.mark.parametrize("name", negatives.list_strategies())
def test_zero_synthetic_points_give_plain_moco_logits(name):
    from pretrain.losses import moco_logits

    zero = negatives.strategies.get(name).zero_kwargs
    if zero is None:
        pytest.skip(f"{where(name, 'zero_kwargs')} is None: no plain-MoCo limit declared")
    torch.manual_seed(0)
    q, k, queue, labels = inputs(3)
    extra = negatives.create(name, **zero).negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=labels, epoch=5.0)
    )
    for t in (extra.shared, extra.per_query):
        assert t is None or t.shape[-2] == 0
    shared = extra.shared if extra.shared is not None and extra.shared.numel() else None
    per_query = extra.per_query if extra.per_query is not None and extra.per_query.numel() else None
    torch.testing.assert_close(moco_logits(q, k, queue, 0.2, shared, per_query),
                               moco_logits(q, k, queue, 0.2), rtol=0, atol=0)  # fmt: skip


@pytest.mark.parametrize("name", negatives.list_strategies())
def test_strategy_runs_in_a_training_step(name, tmp_path):
    """One real CPU training step of the digits config with this strategy."""
    from pretrain import config
    from pretrain.engine import loop

    kwargs = ", ".join(f"{k}: {json.dumps(v)}" for k, v in
                       negatives.strategies.get(name).contract_kwargs.items())  # fmt: skip
    replaces = negatives.strategies.get(name).replaces_queue
    cfg = config.load("digits_moco.yaml", [
        f"out_dir={tmp_path}", "model.width=8", "train.batch_size=16", "moco.queue_size=32",
        f"negatives.name={name}", f"negatives.kwargs={{{kwargs}}}",
        *(["loss.name=nt_xent", "loss.contrast_queue=false"] if replaces else []),
    ])  # fmt: skip
    run = loop.setup(cfg)
    x1, x2, y, _, *rows = next(iter(run.data.train_loader))
    before = run.queue.keys.clone()
    state_before = {k: v.clone() for k, v in run.strategy.state_dict().items()
                    if isinstance(v, torch.Tensor)}  # fmt: skip
    loss = loop.train_step(run, Batch.make(x1, x2, y, rows), 1.0)
    assert torch.isfinite(loss)
    assert torch.equal(run.queue.keys[16:], before[16:])  # only the batch's keys were enqueued
    assert not torch.equal(run.queue.keys[:16], before[:16])
    for key, value in state_before.items():  # a strategy's own buffers move with training
        assert not torch.equal(run.strategy.state_dict()[key], value), key
    for value in run.strategy.diagnostics().values():
        if not isinstance(value, str):  # a label such as MiOC's ocsvm_path
            assert torch.isfinite(torch.as_tensor(value, dtype=torch.float64)).all()
