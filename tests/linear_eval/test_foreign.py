"""Weights made elsewhere: a MoCo v2 ``.pth.tar`` layout and a torchvision state dict, built
here from a negmine checkpoint, give the same kNN results as that checkpoint; unmatched keys are
named."""

from __future__ import annotations

import json

import pytest
import torch

from linear_eval.__main__ import main
from pretrain.runtime import checkpoint_io
from tests.helpers.fakeckpt import make_checkpoint

R18 = ["model.arch=resnet18", "model.cifar_stem=false"]
SET = ["--config", "digits_moco.yaml", "--set", "eval.batch_size=512", "data.num_workers=0"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    base = tmp_path_factory.mktemp("foreign")
    ckpt = make_checkpoint(base / "run", *R18)
    model = checkpoint_io.load(ckpt)["model"]
    pre = "encoder_q.backbone."
    bb = {k[len(pre) :]: v for k, v in model.items() if k.startswith(pre)}
    moco = {f"module.encoder_q.{k}": v for k, v in bb.items()}
    moco |= {"module.encoder_q.fc.0.weight": torch.zeros(4, 512), "module.queue": torch.zeros(2)}
    torch.save({"state_dict": moco, "arch": "resnet18", "epoch": 800}, base / "moco.pth.tar")
    torch.save(bb | {"fc.weight": torch.zeros(10, 512)}, base / "tv.pth")
    broken = dict(bb)
    del broken["layer3.0.bn2.running_var"]
    torch.save(broken, base / "broken.pth")
    torch.save({"weights": bb}, base / "odd.pth")
    return base, ckpt


def _knn(capsys, *args) -> dict:
    assert main(["knn", "--presets", "cifar", "--no-cache", *args]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_moco_and_torchvision_layouts_equal_the_negmine_checkpoint(files, capsys):
    base, ckpt = files
    ours = _knn(capsys, "--ckpt", str(ckpt))
    for name in ("moco.pth.tar", "tv.pth"):
        got = _knn(capsys, "--ckpt", str(base / name), *SET)
        assert got["variants"]["cifar"]["top1"] == ours["variants"]["cifar"]["top1"], name
        assert (base / f"{name}.eval" / "eval" / "knn.json").is_file()


def test_unmatched_keys_are_named(files, capsys):
    base, _ = files
    assert main(["knn", "--ckpt", str(base / "broken.pth"), "--no-cache", *SET]) == 1
    assert "missing ['layer3.0.bn2.running_var']" in capsys.readouterr().err
    assert main(["knn", "--ckpt", str(base / "odd.pth"), "--no-cache", *SET]) == 1
    err = capsys.readouterr().err
    assert "neither a negmine checkpoint nor a known layout" in err and "['weights']" in err


@pytest.mark.parametrize("command", [[], ["knn"]])
def test_weights_made_elsewhere_without_config_name_the_flag(files, capsys, command):
    """A MoCo or torchvision file given as a negmine checkpoint: exit 1 and the way out, --config,
    in the message (not only "is not a negmine checkpoint")."""
    base, _ = files
    for name in ("moco.pth.tar", "tv.pth"):
        assert main([*command, "--ckpt", str(base / name), "--no-cache"]) == 1
        err = capsys.readouterr().err
        assert "is not a negmine-1 negmine checkpoint" in err, err
        assert "Weights made elsewhere" in err and "--config CFG" in err, err


def test_negmine_checkpoint_given_config_is_named_as_such(files, capsys):
    """Our own checkpoint with --config: say it carries its own config (it was called "neither a
    negmine checkpoint nor a known layout")."""
    _, ckpt = files
    assert main(["knn", "--ckpt", str(ckpt), "--no-cache", *SET]) == 2  # a usage error
    err = capsys.readouterr().err
    assert "is a negmine checkpoint, which carries its own config: drop --config" in err, err
    assert "neither" not in err
    assert main(["--ckpt", str(ckpt), "--no-cache", "--epochs", "1", *SET]) == 2  # default command
    assert "is a negmine checkpoint, which carries its own config" in capsys.readouterr().err


def test_foreign_file_needing_pickle_is_refused_without_unsafe_advice(files, capsys):
    base, _ = files
    torch.save({"conv1.weight": torch.nn.Linear(2, 2)}, base / "pickled.pth")
    assert main(["knn", "--ckpt", str(base / "pickled.pth"), "--no-cache", *SET]) == 1
    err = capsys.readouterr().err
    assert "is corrupt or not a torch checkpoint" in err, err
    assert "weights_only" not in err and "trust" not in err
