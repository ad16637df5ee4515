"""A strategy's output is checked once, at the first step (issue 52 item 6): a bare tensor, a
wrong shape, dtype or device, or a tensor with gradient (``s.q * 50``: neither detached nor unit
norm, which trained with exit 0 and gradients through the "negatives") is exit 2 naming the
strategy's class and hook, not a traceback deep in the loss. Metadata only: no host sync."""

from __future__ import annotations

import pytest
import torch
from inproc import pretrain

import negatives
from negatives import ExtraNegatives, NegativeStrategy, StrategyInputs
from pretrain.config import ConfigError
from pretrain.engine.step import check_extra

Q = torch.randn(4, 8)
WANT = "return ExtraNegatives(shared=(M, 8), per_query=(4, S, 8)) of detached, unit-norm "


class Scaled(NegativeStrategy):
    """Returns the queries scaled: with gradient, not unit norm (a test strategy)."""

    def negatives(self, s: StrategyInputs) -> ExtraNegatives:
        return ExtraNegatives(shared=s.q * 50)


@pytest.mark.parametrize(
    ("extra", "why"),
    [(Q.detach(), "returned a Tensor"),
     (ExtraNegatives(shared=torch.zeros(3, 7)), "returned shared of shape (3, 7)"),
     (ExtraNegatives(per_query=torch.zeros(5, 2, 8)), "returned per_query of shape (5, 2, 8)"),
     (ExtraNegatives(shared=torch.zeros(3, 8, dtype=torch.float64)),
      "returned shared of dtype torch.float64"),
     (ExtraNegatives(shared=torch.zeros(3, 8, requires_grad=True)),
      "returned shared of a tensor with gradient (not detached)")],
)  # fmt: skip
def test_a_bad_first_output_names_the_class_and_the_hook(extra, why):
    with pytest.raises(ConfigError) as info:
        check_extra(Scaled(), extra, Q)
    assert str(info.value).startswith(f"negative strategy {__name__}.Scaled.negatives() {why}; ")
    assert WANT in str(info.value)
    good = torch.nn.functional.normalize(torch.randn(3, 8), dim=1)
    check_extra(Scaled(), ExtraNegatives(shared=good), Q)  # a good one passes


def test_a_strategy_returning_scaled_queries_is_exit_2(tmp_path, monkeypatch):
    negatives.strategies.names()
    monkeypatch.setattr(negatives.strategies, "_classes", dict(negatives.strategies._classes))
    negatives.register("scaled_queries_test")(Scaled)
    done = pretrain("--cfg", "digits_moco.yaml", f"out_dir={tmp_path}", "model.width=8",
                    "train.max_steps=1", "eval.knn_every=0", "train.progress_bar=false",
                    "data.num_workers=0", "train.batch_size=32", "moco.queue_size=64",
                    "negatives.name=scaled_queries_test")  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Scaled.negatives() returned non-finite or not unit-norm negatives at its first " in (
        done.stderr
    ), done.stderr[-2000:]
