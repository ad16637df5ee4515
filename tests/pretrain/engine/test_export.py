"""``python -m pretrain export``: torchvision / timm state dicts load strictly and give our
backbone's features; detectron2's pickle has MoCo's converter layout and exactly the parameter
names detectron2's ResNet declares (derived here from its architecture, independently)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

from pretrain import config
from pretrain.__main__ import main
from pretrain.runtime import checkpoint_io
from tests.helpers.fakeckpt import make_checkpoint

IMAGENET_STEM = ["model.arch=resnet18", "model.cifar_stem=false", "model.width=64"]


@pytest.fixture(scope="module")
def r18(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("r18"), *IMAGENET_STEM)


def _our_backbone(ckpt):
    state = checkpoint_io.load(ckpt)
    cfg = config.from_dict(state["config"])
    torch.manual_seed(0)
    from pretrain import build as pbuild

    moco = pbuild.model(cfg)
    moco.load_state_dict(state["model"])
    return moco.encoder_q.backbone.eval()


def test_torchvision_loads_strictly_and_gives_our_features(r18, tmp_path):
    out = tmp_path / "r18.pth"
    assert main(["export", "--ckpt", str(r18), "--to", "torchvision", "--out", str(out)]) == 0
    net = torchvision.models.resnet18(weights=None)
    net.fc = nn.Identity()
    net.load_state_dict(torch.load(out, weights_only=True), strict=True)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(net.eval()(x), _our_backbone(r18)(x), rtol=0, atol=1e-6)


def test_timm_loads_strictly_and_gives_our_features(r18, tmp_path):
    timm = pytest.importorskip("timm", reason="timm (in the [dev] extra) is not installed")
    out = tmp_path / "r18_timm.pth"
    assert main(["export", "--ckpt", str(r18), "--to", "timm", "--out", str(out)]) == 0
    net = timm.create_model("resnet18", pretrained=False, num_classes=0)
    net.load_state_dict(torch.load(out, weights_only=True), strict=True)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(net.eval()(x), _our_backbone(r18)(x), rtol=0, atol=1e-5)


def detectron2_resnet_names(depth: int) -> set[str]:
    """The parameters/buffers of detectron2's ``build_resnet_backbone`` (FrozenBN): BasicStem
    ``stem.conv1`` (+ ``.norm``); stages res2..res5; BasicBlock (R18/34: conv1, conv2) or
    BottleneckBlock (R50: conv1..conv3); a ``shortcut`` (+ ``.norm``) in a stage's first block
    when the channel count or the stride changes."""
    blocks = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3]}[depth]
    convs = 2 if depth < 50 else 3
    norm = ("weight", "bias", "running_mean", "running_var")

    def conv(prefix: str) -> set[str]:
        return {f"{prefix}.weight"} | {f"{prefix}.norm.{n}" for n in norm}

    names = conv("stem.conv1")
    in_ch = 64
    for s, n in enumerate(blocks):
        out_ch = 64 * 2**s * (4 if depth >= 50 else 1)
        for b in range(n):
            for c in range(1, convs + 1):
                names |= conv(f"res{s + 2}.{b}.conv{c}")
            if b == 0 and (in_ch != out_ch or s > 0):
                names |= conv(f"res{s + 2}.{b}.shortcut")
            in_ch = out_ch
    return names


@pytest.mark.parametrize("arch,depth", [("resnet18", 18), ("resnet50", 50)])
def test_detectron2_pickle_has_its_resnet_names(arch, depth, tmp_path):
    ckpt = make_checkpoint(tmp_path / "run", f"model.arch={arch}", "model.cifar_stem=false")
    out = tmp_path / "d2.pkl"
    assert main(["export", "--ckpt", str(ckpt), "--to", "detectron2", "--out", str(out)]) == 0
    with out.open("rb") as fh:
        blob = pickle.load(fh)
    assert blob["matching_heuristics"] is True and blob["__author__"] == "negmine"
    assert set(blob["model"]) == detectron2_resnet_names(depth)
    assert all(isinstance(v, np.ndarray) for v in blob["model"].values())
    state = checkpoint_io.load(ckpt)["model"]
    np.testing.assert_array_equal(
        blob["model"]["res3.0.shortcut.norm.running_var"],
        state["encoder_q.backbone.layer2.0.downsample.1.running_var"].numpy(),
    )
    np.testing.assert_array_equal(
        blob["model"]["stem.conv1.norm.weight"], state["encoder_q.backbone.bn1.weight"].numpy()
    )


def test_cifar_stem_and_small_resnet_are_refused_with_the_reason(tmp_path, capsys):
    stem = make_checkpoint(tmp_path / "a", "model.arch=resnet18", "model.cifar_stem=true")
    small = make_checkpoint(tmp_path / "b")
    for target in ("torchvision", "timm", "detectron2"):
        out = tmp_path / f"{target}.out"
        assert main(["export", "--ckpt", str(stem), "--to", target, "--out", str(out)]) == 2
        assert "cifar_stem" in capsys.readouterr().err and not out.exists()
        assert main(["export", "--ckpt", str(small), "--to", target, "--out", str(out)]) == 2
        assert "resnet_small" in capsys.readouterr().err and not out.exists()
