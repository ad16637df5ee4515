"""The trainer's checks of each step (negmine_core.contract.watch, ``Run.watch``): a strategy's
record of the wrong form fails at the step that returns it, naming the class and ``negatives()``
(with the symmetric layout's fix where that is the cause), before the loss sees it; non-finite or
non-unit negatives are named at the next log step instead of advice on the learning rate, also when
they start after 8 good steps or come on every 5th call only; every step stays free of host syncs
(the values are read at the log step only)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from negatives import ExtraNegatives, NegativeStrategy, Step
from negmine_core.contract import watch as contract_watch
from negmine_core.step import Batch
from pretrain import config
from pretrain.engine import loop
from pretrain.testing import OpCounter, SyncCounter, steps
from tests.helpers.late_faults import GradAfterEight, NaNEveryFifth

TINY = ["model.width=8", "train.batch_size=16", "moco.queue_size=64", "data.num_workers=0",
        "train.progress_bar=false", "train.max_steps=2", "train.log_every=1", "eval.knn_every=0",
        "train.amp='off'"]  # fmt: skip


class OwnRows(NegativeStrategy):
    """Per-query negatives for the first view's queries, symmetric_ok left at True."""

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives(per_query=s.queue[:4].unsqueeze(0).expand(s.emb.q.shape[0], 4, -1))


class Doubles(NegativeStrategy):
    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives(shared=s.queue[:3].double())


class LateNaN(NegativeStrategy):
    """Unit negatives of the right form whose values are NaN."""

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives(shared=s.queue[:3] * float("nan"))


class NaNFromStepTwo(NegativeStrategy):
    """Good negatives at global steps 0 and 1, NaN from step 2 on (step 0's check passes)."""

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        shared = F.normalize(s.queue[:3], dim=1)
        return ExtraNegatives(shared=shared * float("nan") if s.ctx.global_step >= 2 else shared)


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
            "(NaN or inf) from finite queries, keys and queue at the first step"
            ) in err, err  # fmt: skip
    assert "lower train.base_lr" not in err


def test_negatives_that_turn_non_finite_later_are_named_instead_of_learning_rate_advice(
    tmp_path, capsys
):
    status, name = train(tmp_path, NaNFromStepTwo, "train.max_steps=4", "train.log_every=2")
    err = capsys.readouterr().err
    assert status == 1, err
    assert (f"error: strategy {name!r} ({__name__}.NaNFromStepTwo.negatives()): returned "
            "non-finite shared (NaN or inf) from finite queries, keys and queue at an "
            "s.ctx.global_step from 2 to 3: keep them finite (normalise with an eps; guard "
            "divisions)\n"
            "Training stopped at global step 4 (epoch 1): fix the class named above; no "
            "checkpoint was written before it (re-running starts afresh).") in err, err  # fmt: skip
    assert "lower train.base_lr" not in err and "Traceback" not in err


class LongFromStepEight(NegativeStrategy):
    """``s.emb.k`` for 8 steps, then twice as long (detached)."""

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives(shared=s.emb.k if s.ctx.global_step < 8 else 2 * s.emb.k)


def test_a_gradient_after_eight_good_steps_stops_the_run_at_that_step(tmp_path, capsys):
    status, name = train(tmp_path, GradAfterEight, "train.max_steps=12", "train.log_every=4")
    err = capsys.readouterr().err
    assert status == 1, err
    where = f"{GradAfterEight.__module__}.GradAfterEight.negatives()"
    assert (f"error: strategy {name!r} ({where}): returned "
            "shared that carries a gradient at s.ctx.global_step 8: detach it (or decorate the "
            "hook with @torch.no_grad())\nTraining stopped at global step 8 (epoch 1): fix the "
            "class named above; no checkpoint was written before it (re-running starts afresh).\n"
            ) == err[err.index("error: "):], err  # fmt: skip


def test_non_unit_negatives_after_eight_good_steps_are_named_at_the_next_log_step(tmp_path, capsys):
    status, name = train(tmp_path, LongFromStepEight, "train.max_steps=16", "train.log_every=4")
    err = capsys.readouterr().err
    assert status == 1, err
    assert (f"error: strategy {name!r} ({__name__}.LongFromStepEight.negatives()): returned "
            "shared whose rows are not unit norm at an s.ctx.global_step from 8 to 11 (off by 1): "
            "normalise them: F.normalize(x, dim=-1)\nTraining stopped at global step 12 (epoch "
            "1)") in err, err  # fmt: skip


def test_nan_on_every_fifth_call_is_the_strategys_not_the_learning_rates(tmp_path, capsys):
    status, name = train(tmp_path, NaNEveryFifth, "train.max_steps=16", "train.log_every=4")
    err = capsys.readouterr().err
    assert status == 1, err
    where = f"{NaNEveryFifth.__module__}.NaNEveryFifth.negatives()"
    assert (f"error: strategy {name!r} ({where}): returned "
            "non-finite shared (NaN or inf) from finite queries, keys and queue at an "
            "s.ctx.global_step from 8 to 11: keep them finite") in err, err  # fmt: skip
    assert "lower train.base_lr" not in err


class FromQueries(NegativeStrategy):
    """Negatives made from the queries: non-finite only when they are."""

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives(shared=F.normalize(s.emb.q[:3], dim=1))


def test_a_strategy_fed_non_finite_inputs_is_not_blamed(tmp_path):
    """The re-run names the strategy only when it makes non-finite negatives from finite inputs:
    after a divergence upstream (here the queries, non-finite before the check), the advice on the
    learning rate stays."""
    with steps.registered(FromQueries) as name:
        cfg = config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *TINY,
                                               f"negatives.name={name}"])  # fmt: skip
        run = loop.setup(cfg)
        x1, x2, y, _, *rows = next(iter(run.data.train_loader))
        loop.train_step(run, Batch.make(x1, x2, y, rows), 0.5)
        run.watch.at_log(run.state.global_step)  # the first step's records were good
        seen = run.watch.seen
        seen.detached()[0].fill_(float("nan"))  # the queries' storage
        assert not torch.isfinite(run.strategy.negatives(seen).shared).all()
        assert run.watch.strategy_fault(run.strategy) == ""
        run.state.bad_loss |= True
        with pytest.raises(loop.NonFiniteLossError, match="Advice: lower train.base_lr"):
            loop.check_finite(run)
        run.log.close()


def test_the_checked_steps_read_nothing_on_the_host(tmp_path):
    """The checks' device reads wait for the log step: step 0 and the steps after it, each
    checking a strategy's negatives, sync as little as a step without the checks."""
    with steps.registered(LongFromStepEight) as name:
        cfg = config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *TINY,
                                               f"negatives.name={name}"])  # fmt: skip
        run = loop.setup(cfg)
        assert not run.watch.started
        for i, (x1, x2, y, _, *rows) in zip(range(3), run.data.train_loader, strict=False):
            with SyncCounter() as syncs:
                loop.train_step(run, Batch.make(x1, x2, y, rows), 0.5)
            assert syncs.count == 0, (i, syncs.report())
            run.state.global_step += 1
            assert run.watch.started
        run.watch.at_log(run.state.global_step)  # good records: nothing raised
        run.log.close()


def test_unit_norm_is_checked_too(tmp_path):
    class Long(NegativeStrategy):
        @torch.no_grad()
        def negatives(self, s: Step) -> ExtraNegatives:
            return ExtraNegatives(shared=2 * F.normalize(s.queue[:3], dim=1))

    with steps.registered(Long) as name:
        cfg = config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *TINY,
                                               f"negatives.name={name}"])  # fmt: skip
        run = loop.setup(cfg)
        x1, x2, y, _, *rows = next(iter(run.data.train_loader))
        loop.train_step(run, Batch.make(x1, x2, y, rows), 0.5)
        with pytest.raises(contract_watch.StepContractError,
                           match=r"Long\.negatives\(\)\): returned shared whose rows are not "
                                 r"unit norm at the first step"):  # fmt: skip
            run.watch.at_log(run.state.global_step)
        run.log.close()


def test_the_value_checks_cost_what_the_docs_say():
    """docs/plugins.md: 9 aten ops per step for the inputs' finiteness and 8 per returned tensor
    (a steady step: the running maxima exist), no host sync."""
    q = F.normalize(torch.randn(4, 8), dim=1)
    seen = Step.single(q, q, queue=F.normalize(torch.randn(16, 8), dim=1))
    watch = contract_watch.Watch(start=0, since=0)
    for fields in ({"shared": q[:2]}, {"shared": q[:2], "per_query": q.unsqueeze(1)}):
        contract_watch.track(watch, ExtraNegatives(**fields), seen)  # the maxima's first values
        with OpCounter() as ops, SyncCounter() as syncs:
            contract_watch.track(watch, ExtraNegatives(**fields), seen)
        assert ops.count == 9 + 8 * len(fields), ops.top(20)
        assert syncs.count == 0, syncs.report()
    assert contract_watch.Watch(start=0, since=0, last=0).when() == " at the first step"
