"""``python -m linear_eval`` refuses, before any work and with exit 2 naming the flag, what it
would otherwise ignore or fail on with a traceback: ``--set`` without ``--config``, ``--data-root``
for a built-in dataset, a seed outside pretraining's range, ``--counts 0``, a ``--device`` the host
lacks. An old checkpoint's migrated config is one plain ``note:`` line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers import inproc
from tests.helpers.fakeckpt import make_checkpoint
from tests.helpers.troubleshooting_quotes import assert_documented

SEED = "give a whole number in [0, 4294967295] (as pretraining's seed: numpy's generators take "
SEED += "32-bit seeds)"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("run"))


def refused(*argv: str) -> str:
    """The one error line of a refused ``python -m linear_eval ARGV`` (exit 2)."""
    done = inproc.linear_eval(*argv)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    [line] = [s for s in done.stderr.splitlines() if s.startswith("error: ")]
    message = line.removeprefix("error: ")
    assert_documented(message)
    return message


@pytest.mark.parametrize(
    ("argv", "flag", "value"),
    [([], "--seed", str(2**64)), ([], "--seed", "-1"), (["linear"], "--seeds", str(2**32)),
     (["ood"], "--crop-seed", "-1"), (["all"], "--seeds", str(2**32 + 5))],
)  # fmt: skip
def test_a_seed_outside_pretrainings_range_is_refused_naming_the_flag(ckpt, argv, flag, value):
    assert refused(*argv, "--ckpt", str(ckpt), flag, value) == f"{flag} {value}: {SEED}"


@pytest.mark.parametrize("argv", [[], ["knn"]])
def test_set_without_config_is_refused_naming_both(ckpt, argv):
    assert refused(*argv, "--ckpt", str(ckpt), "--set", "garbage") == (
        "--set garbage is given without --config: --set overrides the file that --config names "
        "(for weights made elsewhere), and a negmine checkpoint carries its own config; drop "
        "--set (--data-root PATH points a run at moved data)"
    )


@pytest.mark.parametrize("argv", [[], ["knn"], ["ood"]])
def test_data_root_on_a_digits_checkpoint_is_refused_naming_the_dataset(ckpt, tmp_path, argv):
    assert refused(*argv, "--ckpt", str(ckpt), "--data-root", str(tmp_path)) == (
        f"--data-root {tmp_path} is not used: the run's dataset 'digits' is scikit-learn's "
        "bundled 8x8 digits, which reads no files, and this command reads no other dataset; "
        "drop --data-root"
    )


def test_limited_counts_of_zero_names_counts(ckpt):
    assert refused("limited", "--ckpt", str(ckpt), "--counts", "10,0") == (
        "--counts 10,0: give labelled images per class as whole numbers >= 1"
    )


def test_a_cuda_device_on_a_host_without_one_is_refused(ckpt, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)  # this host, as a CPU-only one
    assert refused("knn", "--ckpt", str(ckpt), "--device", "cuda") == (
        "--device cuda: no CUDA device is visible on this host; give --device cpu, or leave "
        "--device out (cuda where present, else cpu)"
    )
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert refused("knn", "--ckpt", str(ckpt), "--device", "cuda:2") == (
        "--device cuda:2: this host has 2 CUDA device(s), cuda:0 to cuda:1"
    )
    assert refused("knn", "--ckpt", str(ckpt), "--device", "gpu") == (
        "--device 'gpu' is not a device: give cpu, cuda or cuda:N"
    )
