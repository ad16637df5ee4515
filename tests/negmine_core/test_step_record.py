"""The one record of a training step (negmine_core.step.Step) that a strategy's ``negatives()``
and a loss's ``forward()`` both receive: keyword-only, one-process defaults, no alias
properties, the strategy's view through one method, and no second record left."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest
import torch

import negatives
import negatives.base
import pretrain.losses
import pretrain.losses.base
from negmine_core.step import Embeddings, ExtraNegatives, Step, StepContext
from pretrain import losses


def test_the_two_records_are_gone():
    """StrategyInputs and StepTensors were two records bridged by alias properties."""
    for module in (negatives, negatives.base, pretrain.losses, pretrain.losses.base):
        for old in ("StrategyInputs", "StepTensors"):
            assert not hasattr(module, old), f"{module.__name__}.{old}"


def first_annotation(fn: typing.Callable) -> object:
    """The resolved annotation of ``fn``'s first argument after self."""
    name = list(inspect.signature(fn).parameters)[1]
    return typing.get_type_hints(fn)[name]


@pytest.mark.parametrize(
    "cls",
    [negatives.strategies.get(n) for n in negatives.list_strategies()]
    + [losses.registry.get(n) for n in losses.list_losses()]
    + [negatives.NegativeStrategy, losses.Loss, losses.WithKappa],
    ids=lambda c: c.__qualname__,
)
def test_strategies_and_losses_receive_the_same_record(cls):
    hook = cls.negatives if issubclass(cls, negatives.NegativeStrategy) else cls.forward
    assert first_annotation(hook) is Step


def test_the_record_is_frozen_and_keyword_only_with_one_process_defaults():
    q = torch.zeros(2, 3)
    with pytest.raises(TypeError):
        Step(q, q, q, torch.zeros(2))  # type: ignore[misc]
    s = Step.single(q, q, queue=torch.zeros(4, 3), epoch=1.5)
    assert s.ctx == StepContext(epoch=1.5, global_step=0, rank=0, world_size=1)
    assert s.labels.tolist() == [-1, -1] and s.queue_labels.tolist() == [-1] * 4
    assert s.k_all is s.emb.k and s.labels_all is s.labels and s.q_all is None
    assert s.extra == ExtraNegatives()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.queue = q  # type: ignore[misc]


def test_the_record_has_no_alias_properties():
    """Read ``s.emb.q`` and ``s.ctx.epoch``: no property forwards to a field's field."""
    properties = [n for n, v in vars(Step).items() if isinstance(v, property)]
    assert properties == ["offset"]  # computed (rank x N), not forwarded
    s = Step.single(torch.zeros(2, 3), torch.zeros(2, 3), queue=torch.zeros(4, 3))
    for alias in ("q", "k", "q2", "kappa_q", "support", "epoch", "global_step", "rank"):
        assert not hasattr(s, alias), alias


def test_a_strategy_sees_detached_queries_and_the_rows_it_asked_for():
    q = torch.randn(2, 3, requires_grad=True)
    k, k_all = torch.randn(2, 3), torch.randn(4, 3)
    labels, labels_all = torch.tensor([0, 1]), torch.tensor([0, 1, 2, 3])
    local = Step(
        emb=Embeddings(q=q, k=k),
        k_all=k_all,
        labels=labels,
        labels_all=labels_all,
        queue=torch.zeros(5, 3),
        queue_labels=torch.zeros(5, dtype=torch.long),
        ctx=StepContext(rank=1, world_size=2),
    )
    dq, dk, dy = local.detached()
    assert not dq.requires_grad and torch.equal(dq, q) and dk is k and dy is labels
    assert local.offset == 2
    q_all = torch.randn(4, 3, requires_grad=True)
    every = local.replace(q_all=q_all)
    gq, gk, gy = every.detached()
    assert not gq.requires_grad and torch.equal(gq, q_all) and gk is k_all and gy is labels_all
    assert every.emb is local.emb  # held, not copied


def test_the_loss_gets_the_strategys_record_with_its_negatives():
    """The trainer makes the loss's record from the strategy's with ``replace(extra=...)``: a
    loss reads the negatives the strategy returned for that very record."""
    g = torch.Generator().manual_seed(0)
    q, k = (torch.nn.functional.normalize(torch.randn(4, 8, generator=g), dim=1) for _ in "qk")
    queue = torch.nn.functional.normalize(torch.randn(16, 8, generator=g), dim=1)
    step = Step.single(q, k, queue=queue, epoch=3.0)
    torch.manual_seed(0)
    extra = negatives.create("mochi", num_hard=4, num_mix=2, warmup_epochs=0).negatives(step)
    with_extra = step.replace(extra=extra)
    got = losses.create("infonce", temperature=0.2)(with_extra)
    want = losses.info_nce(losses.moco_logits(q, k, queue, 0.2, None, extra.per_query))
    assert extra.per_query is not None and torch.equal(got, want)
