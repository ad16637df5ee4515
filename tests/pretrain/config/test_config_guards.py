"""Config values that used to pass or end in a traceback: each is a
config error (exit 2) naming the key, the file or the path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pretrain import __main__ as cli
from pretrain import config
from pretrain.config import ConfigError
from pretrain.testing.fakedata import random_images, write_png
from tests.helpers.inproc import pretrain_from as run_here
from tests.helpers.paths import ROOT


def run_cli(args: list, cwd: Path) -> subprocess.CompletedProcess:
    """A process of its own: for an argument that is not UTF-8, which only argv carries."""
    return subprocess.run([sys.executable, "-m", "pretrain", *args], cwd=cwd, capture_output=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip


@pytest.mark.parametrize(
    ("override", "key", "why"),
    [
        ("train.base_lr=inf", "train.base_lr", "must be a finite number"),
        ("train.base_lr=.nan", "train.base_lr", "must be a finite number"),
        ("moco.temperature=-.inf", "moco.temperature", "must be a finite number"),
        ("data.std=[0.5, 0.0, 0.5]", "data.std", "must be positive"),
        ("data.std=[0.5, .inf, 0.5]", "data.std", "must be a finite number"),
        ("data.subset=-1", "data.subset", "must be 0 (all)"),
        ("data.image_size=0", "data.image_size", "must be positive"),
        ("data.eval_resize=0", "data.eval_resize", "must be positive"),
        ("model.width=0", "model.width", "must be positive"),
        ("model.dim=0", "model.dim", "must be positive"),
        ("eval.batch_size=0", "eval.batch_size", "must be positive"),
    ],
)
def test_wrong_values_are_refused_naming_the_key(override, key, why):
    with pytest.raises(ConfigError) as e:
        config.load("digits_moco.yaml", [override])
    assert f"'{key}'" in str(e.value) and why in str(e.value), str(e.value)


def test_duplicate_yaml_keys_are_refused_naming_key_and_line(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  epochs: 5\n  base_lr: 0.1\n  epochs: 50\n")
    with pytest.raises(ConfigError) as e:
        config.load(str(path))
    message = str(e.value)
    assert str(path) in message and "'train.epochs'" in message, message
    assert "lines 2 and 4" in message


def test_duplicate_keys_in_a_command_line_mapping_are_refused():
    with pytest.raises(ConfigError, match=r"'negatives\.kwargs\.k'.*more than once"):
        config.load("digits_moco.yaml", ["negatives.kwargs={k: 1, k: 2}"])


def test_the_same_section_twice_is_a_duplicate(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  epochs: 5\nmodel:\n  width: 8\ntrain:\n  base_lr: 0.1\n")
    with pytest.raises(ConfigError, match=r"'train'.*more than once"):
        config.load(str(path))


def test_non_utf8_config_file_exits_2(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_bytes("train:\n  epochs: 5  # caf\u00e9\n".encode("latin-1"))
    proc = run_here(["--cfg", str(path)], cwd=tmp_path)
    err = proc.stderr
    assert proc.returncode == 2, err
    assert str(path) in err and "not UTF-8" in err and "line 2" in err
    assert "Traceback" not in err


def test_non_utf8_command_line_value_exits_2(tmp_path):
    proc = run_cli(["--cfg", "digits_moco.yaml", b"out_dir=" + bytes(tmp_path) + b"/caf\xe9"],
                   cwd=tmp_path)  # fmt: skip
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "'out_dir'" in err and "not UTF-8" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # nothing was created


def test_cfg_naming_a_directory_exits_2(tmp_path):
    proc = run_here(["--cfg", str(tmp_path)], cwd=tmp_path)
    err = proc.stderr
    assert proc.returncode == 2, err
    assert f"config file {str(tmp_path)!r} is a directory" in err and "Traceback" not in err


def test_unreadable_training_folder_exits_2_naming_it(tmp_path, monkeypatch, capsys):
    images = random_images(8, 16, 0)
    for split in ("train", "test"):
        for i in range(8):
            write_png(tmp_path / "data" / split / f"c{i % 2}" / f"{i}.png", images[i])
    train = tmp_path / "data" / "train"
    if os.geteuid() != 0:
        train.chmod(0)
    else:  # root reads any folder: refuse it the way the kernel would refuse a user
        real_scandir, real_listdir = os.scandir, os.listdir

        def refuse(real):
            def call(path=".", *args):
                if Path(os.fsdecode(path)).resolve() == train.resolve():
                    raise PermissionError(13, "Permission denied", os.fsdecode(path))
                return real(path, *args)

            return call

        monkeypatch.setattr(os, "scandir", refuse(real_scandir))
        monkeypatch.setattr(os, "listdir", refuse(real_listdir))
    try:
        status = cli.main(["--cfg", "digits_moco.yaml", "data.name=imagefolder",
                           f"data.root={tmp_path / 'data'}", f"out_dir={tmp_path / 'run'}",
                           "data.image_size=16", "data.eval_resize=16", "train.batch_size=4",
                           "moco.queue_size=4", "model.width=8"])  # fmt: skip
    finally:
        train.chmod(0o755)
    err = capsys.readouterr().err
    assert status == 2, err
    assert str(train) in err and "permission denied" in err.lower()


def troubleshooting_quotes() -> str:
    return (ROOT / "docs" / "troubleshooting.md").read_text()


def test_troubleshooting_quotes_the_new_config_messages_word_for_word(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    page = troubleshooting_quotes()
    found = []
    for overrides in (["train.base_lr=inf"], ["data.std=[0.5, 0.0, 0.5]"], ["data.subset=-1"],
                      ["data.image_size=0"]):  # fmt: skip
        with pytest.raises(ConfigError) as e:
            config.load("digits_moco.yaml", overrides)
        found.append(str(e.value))
    Path("run.yaml").write_text("train:\n  epochs: 5\n  base_lr: 0.1\n  epochs: 50\n")
    Path("latin.yaml").write_bytes("train:\n  epochs: 5  # caf\u00e9\n".encode("latin-1"))
    for name in ("run.yaml", "latin.yaml", "."):
        with pytest.raises(ConfigError) as e:
            config.load(name)
        found.append(str(e.value).replace("latin.yaml", "run.yaml"))
    with pytest.raises(ConfigError) as e:
        config.load("digits_moco.yaml", ["out_dir=/tmp/caf\udce9"])
    found.append(str(e.value))
    for message in found:
        assert f"`{message}`" in page, message


@pytest.mark.parametrize(
    ("override", "key"),
    [("data.crop_scale=[0.2, 1.5]", "data.crop_scale"),  # C01: the upper bound of 1
     ("data.subset=1.5", "data.subset")],  # C02: a fraction must lie below 1
)  # fmt: skip
def test_crop_scale_above_1_and_a_fractional_subset_above_1_are_refused(override, key):
    """C01 (``crop_scale[1] <= 1`` dropped) and C02 (a fractional ``data.subset`` above 1
    accepted) make these load."""
    with pytest.raises(ConfigError, match=f"config key '{key}'"):
        config.load("digits_moco.yaml", [override])
    config.load("digits_moco.yaml", [override.replace("1.5", "1")])  # the edge is valid


def test_the_kappa_heads_weights_are_typed_like_the_losses_own():
    """C04: the kappa head's weights (the ``kappa`` section) are typed: YAML's ``1e-2`` (a string
    to YAML 1.1) becomes a float, as a loss's own setting does."""
    cfg = config.load("digits_kappa.yaml", ["kappa.lambda_align=1e-2"])
    value = cfg.kappa.lambda_align
    assert value == 0.01 and isinstance(value, float)
