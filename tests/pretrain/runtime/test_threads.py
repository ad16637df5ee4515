"""The intra-op thread rule (pretrain/runtime/threads.py) from the affinity mask and the local
ranks."""

from __future__ import annotations

import os

import pytest
import torch

from pretrain import config
from pretrain.engine import loop
from pretrain.runtime import threads


@pytest.fixture
def node(monkeypatch):
    """Emulate a node: ``node(cores, local_ranks)`` sets the affinity mask and LOCAL_WORLD_SIZE."""
    monkeypatch.delenv(threads.ENV, raising=False)

    def set_node(n: int, local: int = 1) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(n)))
        monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local))

    return set_node


@pytest.fixture
def keep_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("cores", "local", "expected"),
    [(2, 1, 1), (4, 1, 1), (8, 1, 8), (16, 2, 8), (16, 4, 1), (48, 4, 12), (3, 8, 1)],
)
def test_share_of_the_affinity_mask(node, cores, local, expected):
    node(cores, local)
    assert threads.intra_op_threads() == expected


def test_request_and_environment_override(node, monkeypatch):
    node(2)
    assert threads.intra_op_threads(3) == 3  # an explicit train.threads / --threads wins
    monkeypatch.setenv(threads.ENV, "5")
    assert threads.intra_op_threads(3) == 5  # the environment wins over everything
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(threads.ENV, bad)
        with pytest.raises(ValueError, match=threads.ENV):
            threads.intra_op_threads()
    monkeypatch.delenv(threads.ENV)
    with pytest.raises(ValueError, match=">= 0"):
        threads.intra_op_threads(-2)


def test_gpu_run_takes_its_share_not_one(node, keep_threads):
    node(16, 2)
    assert threads.configure(0, "cuda") == 8
    node(4, 1)
    assert threads.configure(0, "cuda") == 4
    assert threads.configure(0, "cpu") == 1 == torch.get_num_threads()


def test_trainer_and_evaluator_use_the_rule(node, keep_threads, tmp_path):
    from linear_eval.inputs.session import configure_threads

    node(12, 1)
    torch.set_num_threads(1)
    assert configure_threads(None, "cpu") == 12 == torch.get_num_threads()
    assert configure_threads(2, "cpu") == 2 == torch.get_num_threads()
    cfg = config.load(
        "digits_moco.yaml", [f"out_dir={tmp_path}", "model.width=8", "train.threads=3"]
    )
    loop.setup(cfg)
    assert torch.get_num_threads() == 3


def test_negative_threads_is_a_config_error():
    with pytest.raises(config.ConfigError, match="train.threads"):
        config.load("digits_moco.yaml", ["train.threads=-1"])
