"""Learning-rate schedules against hand-written formulas."""

from __future__ import annotations

import math

import pytest

from pretrain.engine.schedules import learning_rate


@pytest.mark.parametrize(
    "epoch, expected",
    [
        (0.0, 0.1),
        (5.0, 0.05),  # cos(π/2) = 0
        (10.0, 0.0),
        (2.5, 0.1 * 0.5 * (1 + math.cos(math.pi * 0.25))),
        (7.3, 0.1 * 0.5 * (1 + math.cos(math.pi * 0.73))),
    ],
)
def test_cosine_per_step(epoch, expected):
    assert learning_rate(epoch, 0.1, 10) == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("epoch, floored", [(3.7, 3), (3.0, 3), (0.99, 0), (9.999, 9)])
def test_cosine_per_epoch_reads_the_floored_epoch(epoch, floored):
    # MoCo's adjust_learning_rate: lr · 0.5 · (1 + cos(π · epoch / epochs)), epoch an integer.
    expected = 1.0 * 0.5 * (1 + math.cos(math.pi * floored / 10))
    assert learning_rate(epoch, 1.0, 10, per_epoch=True) == pytest.approx(expected, rel=1e-12)


def test_per_epoch_and_per_step_differ_inside_an_epoch():
    per_step = learning_rate(3.7, 1.0, 10)
    assert per_step == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.37)), rel=1e-12)
    assert learning_rate(3.7, 1.0, 10, per_epoch=True) != per_step


@pytest.mark.parametrize(
    "epoch, expected",
    [
        (0.0, 0.0),
        (0.5, 0.025),  # 0.1 · 0.5 / 2
        (1.5, 0.075),
        (2.0, 0.1),  # end of warm-up: cosine at t = 0
        (6.0, 0.05),  # t = (6 − 2) / (10 − 2) = 0.5
        (8.0, 0.1 * 0.5 * (1 + math.cos(math.pi * 0.75))),
    ],
)
def test_linear_warmup_then_cosine(epoch, expected):
    got = learning_rate(epoch, 0.1, 10, warmup_epochs=2)
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_warmup_is_per_step_even_with_per_epoch_decay():
    assert learning_rate(0.25, 0.8, 10, warmup_epochs=1, per_epoch=True) == pytest.approx(0.2)
    # After warm-up the floored epoch is used: epoch 3.9 -> 3, t = (3 − 1) / 9.
    expected = 0.8 * 0.5 * (1 + math.cos(math.pi * 2 / 9))
    got = learning_rate(3.9, 0.8, 10, warmup_epochs=1, per_epoch=True)
    assert got == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "epoch, per_epoch, expected",
    [
        (0.0, False, 0.3),
        (2.99, False, 0.3),
        (3.0, False, 0.03),
        (5.5, False, 0.03),
        (6.0, False, 0.003),
        (9.0, False, 0.003),
        (3.0, True, 0.03),
        (5.999, True, 0.03),
    ],
)
def test_step_schedule(epoch, per_epoch, expected):
    got = learning_rate(epoch, 0.3, 10, schedule="step", milestones=[3, 6], per_epoch=per_epoch)
    assert got == pytest.approx(expected, rel=1e-12)


def test_step_schedule_with_warmup():
    assert learning_rate(0.5, 0.3, 10, 1, "step", [3, 6]) == pytest.approx(0.15, rel=1e-12)
    assert learning_rate(4.0, 0.3, 10, 1, "step", [3, 6]) == pytest.approx(0.03, rel=1e-12)


def test_unknown_schedule():
    with pytest.raises(ValueError, match="unknown lr schedule 'linear'"):
        learning_rate(1.0, 0.1, 10, schedule="linear")
