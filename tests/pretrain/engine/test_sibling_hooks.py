"""Strategies and losses are siblings: the same ``transform_batch(batch, ctx) -> Batch`` and the
same ``setup(ctx)``, which the trainer calls the same way (both setups once, at build time,
before a checkpoint loads; both transforms each step with the step's context)."""

from __future__ import annotations

import inspect
import typing

import pytest
import torch

from negatives import NegativeStrategy
from negatives.none import NoNegatives
from negmine_core.step import Batch, SetupContext, StepContext
from pretrain import config
from pretrain.engine import loop
from pretrain.losses import Loss
from pretrain.losses.cider import Cider
from pretrain.losses.infonce import InfoNCE

SMALL = ["model.width=8", "data.subset=4", "train.batch_size=8", "moco.queue_size=32",
         "train.progress_bar=false", "data.num_workers=0", "eval.knn_every=0"]  # fmt: skip


@pytest.mark.parametrize("hook", ["transform_batch", "setup"])
def test_both_kinds_declare_the_same_hook(hook):
    ours, theirs = getattr(NegativeStrategy, hook), getattr(Loss, hook)
    assert inspect.signature(ours) == inspect.signature(theirs)
    assert typing.get_type_hints(ours) == typing.get_type_hints(theirs)


def recorder(monkeypatch, cls: type, hook: str, calls: list) -> None:
    """Record ``(cls, args)`` of each call of ``cls.hook``, then run it."""
    original = getattr(cls, hook)

    def spy(self, *args):
        calls.append((cls, args))
        return original(self, *args)

    monkeypatch.setattr(cls, hook, spy)


def test_the_trainer_sets_both_up_once_at_build_time_with_one_context(tmp_path, monkeypatch):
    calls: list = []
    recorder(monkeypatch, NoNegatives, "setup", calls)
    recorder(monkeypatch, InfoNCE, "setup", calls)
    run = loop.setup(config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *SMALL]))
    try:
        assert [cls for cls, _ in calls] == [NoNegatives, InfoNCE]  # the strategy's first
        (ctx,), (same,) = calls[0][1], calls[1][1]
        assert same is ctx and isinstance(ctx, SetupContext)
        assert ctx.model is run.moco and ctx.num_classes == run.data.num_classes
        assert not ctx.resuming
        calls.clear()
        loop.start(run)  # a fresh run's start: no second setup moment
        assert calls == []
    finally:
        run.close()


def test_the_trainer_transforms_the_batch_through_both_with_the_steps_context(
    tmp_path, monkeypatch
):
    calls: list = []
    recorder(monkeypatch, NoNegatives, "transform_batch", calls)
    recorder(monkeypatch, InfoNCE, "transform_batch", calls)
    run = loop.setup(config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *SMALL]))
    try:
        x1, x2, y, _, *rows = next(iter(run.data.train_loader))
        loop.train_step(run, Batch.make(x1, x2, y, rows), 0.5)
    finally:
        run.close()
    assert [cls for cls, _ in calls] == [NoNegatives, InfoNCE]
    (b1, c1), (b2, c2) = calls[0][1], calls[1][1]
    assert isinstance(b1, Batch) and isinstance(b2, Batch)
    assert c1 is c2 and c1 == StepContext(epoch=0.5, global_step=0, rank=0, world_size=1)


def test_a_resumed_run_skips_the_starting_values_a_checkpoint_replaces():
    """CIDER's class means cost a pass over the training set: made for a fresh run only."""

    def refuse() -> tuple[torch.Tensor, torch.Tensor]:
        raise AssertionError("features computed for a resumed run")

    loss = Cider(temperature=0.1, num_classes=3, dim=4)
    loss.setup(SetupContext(dim=4, num_classes=3, features=refuse, resuming=True))
    assert torch.equal(loss.prototypes, torch.zeros(3, 4))  # the checkpoint loads into these
    z = torch.nn.functional.normalize(torch.randn(6, 4), dim=1)
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    loss.setup(SetupContext(dim=4, num_classes=3, features=lambda: (z, y)))
    means = torch.nn.functional.normalize(torch.stack([z[0] + z[1], z[2] + z[3], z[4] + z[5]]))
    assert torch.allclose(loss.prototypes, means, atol=1e-6)
