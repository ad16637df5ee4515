"""Values that used to run with exit 0 (meaningless) or end in a traceback are refused at setup with
a message quoted word for word on docs/troubleshooting.md: config
ranges, MiOC's solver settings, a missing optional backend, and a run lock that is not a file."""

from __future__ import annotations

import sys
from pathlib import Path

import inproc
import pytest

from pretrain import config
from pretrain.config import ConfigError
from pretrain.engine import build, runlock
from tests.test_troubleshooting_data import assert_documented

ROOT = Path(__file__).resolve().parents[1]

BAD_CONFIG = [
    "train.weight_decay=-1", "data.hflip_prob=2", "data.grayscale_prob=-1", "data.jitter_prob=1.5",
    "data.blur_prob=-0.5",
    "data.jitter_strength=-3", "data.jitter_strength=2.5",
    "eval.knn_temperature=0", "eval.knn_temperature=-0.1",
    "train.lr_milestones=[160,120]", "train.lr_milestones=[-5,120]", "train.lr_milestones=[0]",
    "train.lr_milestones=[120,120]", "train.lr_milestones=[0, 20]",  # F03: a 0 before a valid one
    "train.lr_base_batch=0", "train.lr_base_batch=-64",
    "train.sgd_momentum=-1", "train.sgd_momentum=1",
]  # fmt: skip


@pytest.mark.parametrize("override", BAD_CONFIG)
def test_meaningless_config_values_are_refused(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError) as info:
        config.load("digits_moco.yaml", [override])
    message = str(info.value)
    assert message.startswith(f"config key {key!r} = "), message
    assert_documented(message)


def test_non_finite_values_of_typed_keys_stay_refused_by_the_type_check():
    for override in ("train.weight_decay=.nan", "eval.knn_temperature=.inf"):
        with pytest.raises(ConfigError, match="must be a finite number"):
            config.load("digits_moco.yaml", [override])


@pytest.mark.parametrize(
    "override",
    ["train.weight_decay=0", "data.hflip_prob=0", "data.hflip_prob=1", "data.jitter_strength=0",
     "train.lr_milestones=[]", "train.lr_milestones=[1,2]", "train.lr_milestones=[1, 20]",
     "train.sgd_momentum=0"],
)  # fmt: skip
def test_the_edges_of_the_ranges_are_accepted(override):
    config.load("digits_moco.yaml", [override])


def test_a_refused_config_value_exits_2_before_any_work(tmp_path):
    out = inproc.pretrain(
        "--cfg", "digits_moco.yaml", f"out_dir={tmp_path}", "train.lr_base_batch=0"
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "config key 'train.lr_base_batch' = 0 must be positive" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "checkpoints").exists()


BAD_MIOC = [  # non-finite numbers are refused by the kwargs' type check, when the config loads
    ("nu=1", "negatives: nu must lie in (0, 1) for MiOC"),
    ("gamma=.inf", "config key 'negatives.kwargs.gamma' in the config must be a finite number"),
    ("tol=.inf", "config key 'negatives.kwargs.tol' in the config must be a finite number"),
    ("warmup_epochs=.nan",
     "config key 'negatives.kwargs.warmup_epochs' in the config must be a finite number"),
    ("warmup_epochs=.inf",
     "config key 'negatives.kwargs.warmup_epochs' in the config must be a finite number"),
]  # fmt: skip


@pytest.mark.parametrize(("kwarg", "why"), BAD_MIOC, ids=[k for k, _ in BAD_MIOC])
def test_mioc_values_the_solver_would_refuse_are_refused_at_setup(kwarg, why):
    with pytest.raises(ConfigError) as info:
        cfg = config.load("digits_mioc.yaml", [f"negatives.kwargs.{kwarg}"])
        build.strategy(cfg)  # at setup, before the first step (the warm-up no longer hides it)
    assert str(info.value).startswith(why), info.value
    assert_documented(str(info.value))


def test_mioc_nu_just_below_one_is_still_accepted():
    build.strategy(config.load("digits_mioc.yaml", ["negatives.kwargs.nu=0.999"]))


def test_thundersvm_backend_without_the_package_is_refused_at_setup(monkeypatch):
    monkeypatch.setitem(sys.modules, "thundersvm", None)  # not installed (an import fails)
    cfg = config.load("digits_mioc.yaml", ["negatives.kwargs.backend=thundersvm"])
    with pytest.raises(ConfigError) as info:
        build.strategy(cfg)
    assert "pip install thundersvm-cpu" in str(info.value)
    assert_documented(str(info.value))


def test_a_lock_that_is_a_directory_or_a_dangling_link_is_a_clear_error(tmp_path):
    (tmp_path / "a" / ".lock").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / ".lock").symlink_to(tmp_path / "nowhere" / "lock")
    for run, says in (("a", "is a directory, not a file"), ("b", "is a symbolic link to")):
        lock = runlock.RunLock(tmp_path / run)
        with pytest.raises(runlock.RunInUseError) as info:
            lock.acquire()
        assert says in str(info.value) and not lock.held
        assert_documented(str(info.value))
    assert (tmp_path / "a" / ".lock").is_dir() and not (tmp_path / "nowhere").exists()


def test_a_bad_lock_exits_2_with_its_message(tmp_path):
    (tmp_path / ".lock").mkdir()
    out = inproc.pretrain("--cfg", "digits_moco.yaml", f"out_dir={tmp_path}")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "is a directory, not a file" in out.stderr and "Traceback" not in out.stderr
