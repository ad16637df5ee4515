"""A Lightning checkpoint with the backbone as ``backbone.*`` is named after the library its other
keys come from (a lightly checkpoint was called "solo-learn layout"): solo-learn's BaseMethod keeps
``projector``/``classifier``/``momentum_backbone``, lightly's benchmark modules
``projection_head``/``online_classifier``/``backbone_momentum``. Built here from a negmine
checkpoint, each gives that checkpoint's kNN results."""

from __future__ import annotations

import json

import pytest
import torch

from linear_eval.__main__ import main
from linear_eval.inputs import foreign
from pretrain.runtime import checkpoint_io
from tests.helpers.fakeckpt import make_checkpoint

R18 = ["model.arch=resnet18", "model.cifar_stem=false"]
SET = ["--config", "digits_moco.yaml", "--set", "eval.batch_size=512", "data.num_workers=0"]
OTHERS = {  # the modules beside the backbone, as each library names them
    "solo-learn": ("projector.0.weight", "momentum_backbone.conv1.weight", "classifier.weight"),
    "lightly": (
        "projection_head.layers.0.weight",
        "online_classifier.classification_head.weight",
        "backbone_momentum.conv1.weight",
    ),
    "Lightning": ("head.weight",),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    base = tmp_path_factory.mktemp("lightning")
    ckpt = make_checkpoint(base / "run", *R18)
    model = checkpoint_io.load(ckpt)["model"]
    pre = "encoder_q.backbone."
    bb = {f"backbone.{k[len(pre) :]}": v for k, v in model.items() if k.startswith(pre)}
    for library, keys in OTHERS.items():
        sd = bb | {k: torch.zeros(2, 2) for k in keys}
        torch.save({"state_dict": sd, "epoch": 3, "pytorch-lightning_version": "2.4.0"},
                   base / f"{library}.ckpt")  # fmt: skip
    return base, ckpt


def test_each_library_is_named_by_its_other_keys():
    bb = {"backbone.conv1.weight": torch.zeros(1)}
    for library, keys in OTHERS.items():
        sd = bb | dict.fromkeys(keys, torch.zeros(1))
        weights, layout, _ = foreign.backbone_weights({"state_dict": sd}, None)
        assert layout == library and list(weights) == ["conv1.weight"]
    both = bb | dict.fromkeys(OTHERS["lightly"] + OTHERS["solo-learn"], torch.zeros(1))
    assert foreign.backbone_weights({"state_dict": both}, None)[1] == "Lightning"


def test_a_lightly_checkpoint_equals_the_negmine_one_and_its_errors_say_lightly(files, capsys):
    base, ckpt = files
    assert main(["knn", "--presets", "cifar", "--no-cache", "--ckpt", str(ckpt)]) == 0
    ours = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    lightly = base / "lightly.ckpt"
    assert main(["knn", "--presets", "cifar", "--no-cache", "--ckpt", str(lightly), *SET]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got["variants"]["cifar"]["top1"] == ours["variants"]["cifar"]["top1"]

    raw = torch.load(lightly, weights_only=True)
    del raw["state_dict"]["backbone.layer3.0.bn2.running_var"]
    torch.save(raw, base / "broken.ckpt")
    assert main(["knn", "--ckpt", str(base / "broken.ckpt"), "--no-cache", *SET]) == 1
    err = capsys.readouterr().err
    assert "the checkpoint's backbone (lightly layout, broken.ckpt) does not match" in err, err
    assert "solo-learn" not in err
