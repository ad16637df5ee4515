"""The trainer's first-step check (negatives.testing.boundary): a strategy's
record of the wrong form fails at step 1 naming the class and ``negatives()`` (with the
symmetric layout's fix where that is the cause), before the loss sees it; non-finite negatives
are named at the first log step instead of advice on the learning rate; the steady step stays
free of host syncs (the check reads the device at the log step only)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from negatives import ExtraNegatives, NegativeStrategy, StrategyInputs
from negatives.testing import SyncCounter, boundary, steps
from negmine_core.step import Batch
from pretrain import config
from pretrain.engine import loop

TINY = ["model.width=8", "train.batch_size=16", "moco.queue_size=64", "data.num_workers=0",
        "train.progress_bar=false", "train.max_steps=2", "train.log_every=1", "eval.knn_every=0",
        "train.amp='off'"]  # fmt: skip


class OwnRows(NegativeStrategy):
    """Per-query negatives for the first view's queries, symmetric_ok left at True."""

    @torch.no_grad()
    def negatives(self, s: StrategyInputs) -> ExtraNegatives:
        return ExtraNegatives(per_query=s.queue[:4].unsqueeze(0).expand(s.q.shape[0], 4, -1))


class Doubles(NegativeStrategy):
    @torch.no_grad()
    def negatives(self, s: StrategyInputs) -> ExtraNegatives:
        return ExtraNegatives(shared=s.queue[:3].double())


class LateNaN(NegativeStrategy):
    """Unit negatives of the right form whose values are NaN."""

    @torch.no_grad()
    def negatives(self, s: StrategyInputs) -> ExtraNegatives:
        return ExtraNegatives(shared=s.queue[:3] * float("nan"))


def train(tmp_path, cls: type, *overrides: str) -> tuple[int, str]:
    with steps.registered(cls) as name:
        cfg = config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *TINY,
                                               f"negatives.name={name}", *overrides])  # fmt: skip
        return loop.main(cfg), name


def test_per_query_negatives_under_the_symmetric_layout_name_symmetric_ok(tmp_path, capsys):
    status, name = train(tmp_path, OwnRows, "loss.name=nt_xent", "loss.symmetric=true")
    err = capsys.readouterr().err
    assert status == 1, err
    assert (f"error: strategy {name!r} ({__name__}.OwnRows.negatives()): returned per_query "
            "(16, 4, 128); expected (N, S, D) = (32, S, 128) because loss.symmetric=true: "
            "declare symmetric_ok = False (its negatives are the first view's)") in err  # fmt: skip
    assert "Traceback" not in err


def test_a_record_of_another_dtype_fails_at_step_one_naming_the_class(tmp_path, capsys):
    status, name = train(tmp_path, Doubles)
    err = capsys.readouterr().err
    assert (
        status == 1
        and f"strategy {name!r} ({__name__}.Doubles.negatives()): returned "
        "shared of dtype torch.float64, the queue's is torch.float32: cast it"
        in err
    ), err


def test_non_finite_negatives_are_named_instead_of_learning_rate_advice(tmp_path, capsys):
    status, name = train(tmp_path, LateNaN)
    err = capsys.readouterr().err
    assert status == 1, err
    assert (f"strategy {name!r} ({__name__}.LateNaN.negatives()): returned non-finite shared "
            "(NaN or inf) at the first step") in err, err  # fmt: skip
    assert "lower train.base_lr" not in err


def test_the_first_step_reads_nothing_on_the_host(tmp_path):
    """The check's device reads wait for the log step: step 0 syncs as little as any step."""
    cfg = config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *TINY])
    run = loop.setup(cfg)
    assert boundary.first(run)
    x1, x2, y, _, *rows = next(iter(run.data.train_loader))
    with SyncCounter() as syncs:
        loop.train_step(run, Batch.make(x1, x2, y, rows), 0.5)
    assert syncs.count == 0, syncs.report()
    assert not boundary.first(run)
    boundary.at_log(run)  # good records: nothing raised
    run.log.close()


def test_unit_norm_is_checked_too(tmp_path):
    class Long(NegativeStrategy):
        @torch.no_grad()
        def negatives(self, s: StrategyInputs) -> ExtraNegatives:
            return ExtraNegatives(shared=2 * F.normalize(s.queue[:3], dim=1))

    with steps.registered(Long) as name:
        cfg = config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *TINY,
                                               f"negatives.name={name}"])  # fmt: skip
        run = loop.setup(cfg)
        x1, x2, y, _, *rows = next(iter(run.data.train_loader))
        loop.train_step(run, Batch.make(x1, x2, y, rows), 0.5)
        with pytest.raises(boundary.FirstStepError, match=r"Long\.negatives\(\)\): returned "
                           r"shared whose rows are not unit norm at the first step"):  # fmt: skip
            boundary.at_log(run)
        run.log.close()
