"""Config loading: strict keys and types, helpful errors, derived values, CLI exit statuses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pretrain import config
from pretrain.config import ConfigError
from tests.helpers.inproc import pretrain_from as run_cli


def write_yaml(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_config_loads_with_overrides(tmp_path):
    cfg = config.load("digits_moco.yaml", ["train.epochs=5", f"out_dir={tmp_path}"])
    # Values written in pretrain/configs/digits_moco.yaml, then the overrides.
    assert cfg.data.name == "digits"
    assert cfg.data.crop_scale == (0.5, 1.0)
    assert cfg.data.mean == (0.5, 0.5, 0.5)
    assert cfg.model.arch == "resnet_small"
    assert cfg.model.cifar_stem is True
    assert cfg.moco.queue_size == 256
    assert cfg.moco.momentum == 0.99
    assert cfg.moco.temperature == 0.1
    assert cfg.train.batch_size == 64
    assert cfg.train.weight_decay == 5.0e-4
    assert cfg.train.amp == "off"
    assert cfg.train.epochs == 5
    assert cfg.out_dir == str(tmp_path)
    # A default the file does not touch.
    assert cfg.train.sgd_momentum == 0.9


def test_out_dir_defaults_to_runs_and_config_stem():
    cfg = config.load("digits_moco.yaml")
    assert cfg.out_dir == str(Path("runs") / "digits_moco")


def test_unknown_yaml_key_names_key_file_and_closest_key(tmp_path):
    path = write_yaml(tmp_path, "train:\n  epoch: 5\n")
    with pytest.raises(ConfigError, match=r"'train\.epoch'") as info:
        config.load(str(path))
    message = str(info.value)
    assert str(path) in message
    assert "closest valid key: 'train.epochs'" in message


def test_unknown_top_level_key(tmp_path):
    path = write_yaml(tmp_path, "sed: 3\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'sed'.*closest valid key: 'seed'"):
        config.load(str(path))


def test_unknown_override_key_names_command_line():
    with pytest.raises(
        ConfigError, match=r"'moco\.temprature' in command line.*'moco\.temperature'"
    ):
        config.load("digits_moco.yaml", ["moco.temprature=0.2"])


@pytest.mark.parametrize(
    "override, key",
    [
        ("train.epochs=abc", "train.epochs"),
        ("train.deterministic=3", "train.deterministic"),
        ("train.epochs=2.5", "train.epochs"),
        ("train.epochs=true", "train.epochs"),
        ("data.name=7", "data.name"),
        ("data.crop_scale=[0.5]", "data.crop_scale"),
        ("moco.momentum=fast", "moco.momentum"),
    ],
)
def test_wrong_type_names_the_key(override, key):
    with pytest.raises(ConfigError, match=re.escape(f"config key {key!r}")):
        config.load("digits_moco.yaml", [override])


def test_section_given_a_scalar_is_refused(tmp_path):
    path = write_yaml(tmp_path, "train: 5\n")
    with pytest.raises(ConfigError, match=r"'train'.*must be a mapping"):
        config.load(str(path))


@pytest.mark.parametrize("override", ["train.epochs", "=5", "train.epochs:5"])
def test_override_without_equals_raises(override):
    with pytest.raises(ConfigError, match="not of the form dotted.key=value"):
        config.load("digits_moco.yaml", [override])


def test_missing_config_file_suggests_shipped_name():
    with pytest.raises(ConfigError, match=r"not found.*did you mean 'digits_moco\.yaml'"):
        config.load("digits_moco.yml")


@pytest.mark.parametrize(
    "override, key",
    [
        ("moco.temperature=0.001", "moco.temperature"),
        ("moco.momentum=1.5", "moco.momentum"),
        ("train.epochs=0", "train.epochs"),
        ("model.bn_splits=3", "model.bn_splits"),  # does not divide the batch of 64
        ("data.name=cifar", "data.name"),
    ],
)
def test_bad_values_are_refused(override, key):
    with pytest.raises(ConfigError, match=re.escape(repr(key))):
        config.load("digits_moco.yaml", [override])


def test_float_key_accepts_exponent_without_dot(tmp_path):
    # PyYAML (YAML 1.1) reads 1e-4 without a dot as the string "1e-4".
    path = write_yaml(tmp_path, "train:\n  weight_decay: 1e-4\n  base_lr: 3e-2\n")
    cfg = config.load(str(path), ["moco.temperature=2e-1"])
    assert cfg.train.weight_decay == 1e-4
    assert isinstance(cfg.train.weight_decay, float)
    assert cfg.train.base_lr == 0.03
    assert cfg.moco.temperature == 0.2


def test_yaml_off_means_the_choice_off(tmp_path):
    # YAML 1.1 reads unquoted `off` as False: for a key whose choices include "off", it is that.
    path = write_yaml(tmp_path, "train:\n  amp: off\n")
    assert config.load(str(path), [f"out_dir={tmp_path}"]).train.amp == "off"
    cfg = config.load("digits_moco.yaml", ["train.amp=off", f"out_dir={tmp_path}"])
    assert cfg.train.amp == "off"


def test_yaml_boolean_for_a_str_key_without_that_choice_says_to_quote(tmp_path):
    with pytest.raises(ConfigError, match=r"'data.name'.*quote the value"):
        config.load("digits_moco.yaml", ["data.name=yes", f"out_dir={tmp_path}"])


def test_int_widens_to_float_and_list_to_tuple(tmp_path):
    path = write_yaml(tmp_path, "moco:\n  momentum: 1\ndata:\n  crop_scale: [1, 1]\n")
    cfg = config.load(str(path))
    assert cfg.moco.momentum == 1.0 and isinstance(cfg.moco.momentum, float)
    assert cfg.data.crop_scale == (1.0, 1.0)


def test_derived_matches_hand_numbers():
    cfg = config.load(
        "digits_moco.yaml",
        [
            "train.batch_size=128",
            "train.base_lr=0.03",
            "train.lr_base_batch=256",
            "train.epochs=7",
            "moco.queue_size=512",
        ],
    )
    info = config.derived(cfg, train_size=1437, world_size=2)
    assert info.lr == pytest.approx(0.015, rel=1e-15)  # 0.03 * 128 / 256
    assert info.steps_per_epoch == 11  # 1437 // 128 (drop_last)
    assert info.total_steps == 77
    assert info.global_batch == 128
    assert info.per_rank_batch == 64
    assert info.train_size == 1437
    assert info.initial_loss_ln_1_plus_K == round(6.240275845170769, 4)  # ln(513)


def test_derived_does_not_mutate_config():
    cfg = config.load("digits_moco.yaml")
    before = config.to_dict(cfg)
    config.derived(cfg, 1000)
    assert config.to_dict(cfg) == before


def test_to_dict_from_dict_round_trip():
    cfg = config.load(
        "digits_moco.yaml",
        [
            "train.lr_milestones=[3, 6]",
            "data.crop_scale=[0.3, 0.9]",
            "negatives.name=mioc",
            "negatives.kwargs={nu: 0.5}",
            "seed=7",
        ],
    )
    raw = config.to_dict(cfg)
    assert raw["data"]["crop_scale"] == [0.3, 0.9]  # tuples become lists
    back = config.from_dict(raw)
    assert back == cfg
    assert back.data.crop_scale == (0.3, 0.9)
    assert back.negatives.kwargs == {"nu": 0.5}


def test_from_dict_is_strict():
    raw = config.to_dict(config.load("digits_moco.yaml"))
    raw["train"]["epoch"] = 3
    with pytest.raises(ConfigError, match=r"'train\.epoch' in checkpoint"):
        config.from_dict(raw)


def test_dump_reloads_to_the_same_config(tmp_path):
    cfg = config.load("digits_moco.yaml", ["train.epochs=3"])
    path = write_yaml(tmp_path, config.dump(cfg))
    assert config.load(str(path)) == cfg


def test_cli_unknown_key_exits_2_naming_key_and_file(tmp_path):
    path = write_yaml(tmp_path, "moco:\n  queue_sise: 128\n")
    proc = run_cli(["--cfg", str(path)], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "moco.queue_sise" in proc.stderr
    assert str(path) in proc.stderr
    assert "moco.queue_size" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_missing_dataset_exits_2_naming_path(tmp_path):
    empty = tmp_path / "no_data"
    empty.mkdir()
    proc = run_cli(
        [
            "--cfg",
            "digits_moco.yaml",
            "data.name=cifar10",
            f"data.root={empty}",
            "train.epochs=1",
            f"out_dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert str(empty / "cifar-10-batches-py") in proc.stderr
    assert "Traceback" not in proc.stderr
