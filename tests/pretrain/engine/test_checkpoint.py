"""Checkpoints: weights_only round trip, RNG capture, corrupt files, atomic writes."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

from pretrain.engine import checkpoint
from pretrain.runtime import checkpoint_io
from pretrain.runtime.checkpoint_io import CheckpointError
from tests.helpers.paths import ROOT


def draws() -> tuple[torch.Tensor, np.ndarray, list[float]]:
    return torch.rand(5), np.random.rand(5), [random.random() for _ in range(5)]


def assert_same_draws(a, b) -> None:
    assert torch.equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert a[2] == b[2]


def sample_state() -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        "format": checkpoint_io.FORMAT,
        "epoch": 3,
        "step_in_epoch": 7,
        "global_step": 52,
        "config": {"train": {"epochs": 10, "lr_milestones": [3, 6]}, "seed": 0, "out_dir": "r"},
        "model": {"w": torch.randn(3, 4, generator=g), "n": torch.tensor(5)},
        "queue": {"keys": torch.randn(32, 16, generator=g), "ptr": torch.tensor(8)},
        "optimizer": {
            "state": {0: {"momentum_buffer": torch.ones(2)}},
            "param_groups": [{"lr": 0.1, "params": [0]}],
        },
        "rng": checkpoint.rng_state(),
        "epoch_stats": {"loss_sum": torch.tensor(1.5, dtype=torch.float64)},
    }


def assert_nested_equal(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_nested_equal(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_nested_equal(x, y)
    else:
        assert a == b


def test_round_trip_of_tensors_nested_dicts_and_rng(tmp_path):
    state = sample_state()
    path = tmp_path / "ckpt" / "last.pt"  # parent folder is created
    checkpoint_io.save(state, path)
    loaded = checkpoint_io.load(path)
    assert_nested_equal(state, loaded)
    # Plain torch can read it with the restricted unpickler.
    raw = torch.load(path, weights_only=True)
    assert raw["epoch"] == 3 and torch.equal(raw["model"]["w"], state["model"]["w"])


def test_rng_state_restores_torch_numpy_and_python():
    torch.manual_seed(11)
    np.random.seed(11)
    random.seed(11)
    draws()  # move away from the seeded positions (numpy gauss cache included)
    np.random.standard_normal()
    saved = checkpoint.rng_state()
    first = draws()
    second = draws()
    assert not torch.equal(first[0], second[0])
    checkpoint.set_rng_state(saved)
    assert_same_draws(draws(), first)


def test_rng_state_survives_the_file(tmp_path):
    torch.manual_seed(3)
    np.random.seed(3)
    random.seed(3)
    state = sample_state()
    first = draws()
    checkpoint_io.save(state, tmp_path / "last.pt")
    draws()
    checkpoint.set_rng_state(checkpoint_io.load(tmp_path / "last.pt")["rng"])
    assert_same_draws(draws(), first)


def write_truncated(path):
    checkpoint_io.save(sample_state(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(
    "make",
    [
        write_truncated,
        lambda p: p.write_bytes(
            np.random.default_rng(0).integers(0, 256, 4096, np.uint8).tobytes()
        ),
        lambda p: p.write_text("epoch: 3\nthis is not a checkpoint\n"),
        lambda p: p.write_bytes(b""),
    ],
    ids=["truncated", "random-bytes", "text", "empty"],
)
def test_corrupt_files_raise_checkpoint_error(tmp_path, make):
    path = tmp_path / "last.pt"
    make(path)
    with pytest.raises(CheckpointError, match=r"last\.pt is corrupt or not a torch checkpoint"):
        checkpoint_io.load(path)


def test_pickled_object_is_refused_by_weights_only(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({**sample_state(), "extra": nn.Linear(2, 2)}, path)  # needs pickle globals
    with pytest.raises(CheckpointError, match="corrupt or not a torch checkpoint"):
        checkpoint_io.load(path)


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        checkpoint_io.load(tmp_path / "nothing.pt")


def test_missing_required_keys_are_listed(tmp_path):
    state = sample_state()
    del state["optimizer"], state["rng"]
    checkpoint_io.save(state, tmp_path / "last.pt")
    with pytest.raises(CheckpointError, match="lacks optimizer, rng"):
        checkpoint_io.load(tmp_path / "last.pt")


@pytest.mark.parametrize("obj", [{"epoch": 1}, {**sample_state(), "format": "other-1"}, [1, 2]])
def test_foreign_checkpoints_are_refused(tmp_path, obj):
    torch.save(obj, tmp_path / "last.pt")
    with pytest.raises(CheckpointError, match="is not a negmine-1 negmine checkpoint"):
        checkpoint_io.load(tmp_path / "last.pt")


def test_save_leaves_no_temporary_files(tmp_path):
    checkpoint_io.save(sample_state(), tmp_path / "last.pt")
    checkpoint_io.save(sample_state(), tmp_path / "last.pt")  # replace an existing file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


def test_failed_save_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    old = sample_state()
    checkpoint_io.save(old, path)
    before = path.read_bytes()

    def broken_save(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a zip file")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    new = sample_state()
    new["epoch"] = 4
    with pytest.raises(CheckpointError, match="disk full.*the previous checkpoint .* is intact"):
        checkpoint_io.save(new, path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert checkpoint_io.load(path)["epoch"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


def test_load_module_loads_matching_weights():
    src, dst = nn.Linear(4, 3), nn.Linear(4, 3)
    checkpoint_io.load_module(dst, src.state_dict(), "model")
    assert torch.equal(dst.weight, src.weight) and torch.equal(dst.bias, src.bias)


def test_load_module_shape_mismatch_names_the_key():
    weights = nn.Linear(4, 2).state_dict()
    with pytest.raises(CheckpointError, match=r"model does not match.*weight \(2, 4\) vs \(3, 4\)"):
        checkpoint_io.load_module(nn.Linear(4, 3), weights, "model")


def test_load_module_missing_and_unexpected_keys():
    weights = {"weight": torch.zeros(3, 4), "scale": torch.ones(1)}
    with pytest.raises(
        CheckpointError,
        match=r"queue does not match.*missing \['bias'\]"
        r".*unexpected \['scale'\]",
    ):
        checkpoint_io.load_module(nn.Linear(4, 3), weights, "queue")


def test_the_old_checkpoint_shims_end_at_their_stated_version():
    """pretrain/engine/checkpoint.py reads checkpoints written before data.augment_on existed
    (no data.augment_on, the loss state under "objective") until negmine
    OLD_CHECKPOINTS_READ_UNTIL; this fails when pyproject.toml reaches that version, so the two
    shims are removed then, not kept forever."""

    from tests.helpers.compat import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    version = tuple(int(p) for p in meta["project"]["version"].split(".")[:2])
    assert version < checkpoint.OLD_CHECKPOINTS_READ_UNTIL, "remove the shims"
