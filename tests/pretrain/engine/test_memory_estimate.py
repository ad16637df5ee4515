"""The memory estimate of pretrain/engine/memory.py against measured references (the built
model's parameter count, exactly; the tensors autograd saves for the backward pass, as an upper
bound), the shipped recipes within a 24 GiB machine or an 80 GB GPU, and the configs that used to
allocate and crash refused with exit 2 before any work, naming the keys and the estimate."""

from __future__ import annotations

import pytest
import torch

from pretrain import build, config
from pretrain.engine import memory
from pretrain.model import encoders
from tests.helpers import inproc
from tests.helpers.troubleshooting_quotes import assert_documented

GIB = 2**30
SMALL_MODELS = [
    ["model.arch=resnet_small", "model.width=4"],
    ["model.arch=resnet_small", "model.width=8", "kappa.hidden=16", "model.mlp=false"],
    ["model.arch=resnet18", "model.cifar_stem=false"],
    ["model.arch=resnet34"],
    ["model.arch=resnet50", "model.dim=64"],
]


@pytest.mark.parametrize("overrides", SMALL_MODELS, ids=lambda o: " ".join(o))
def test_the_parameter_term_is_the_built_encoders_count(overrides):
    cfg = config.load("digits_moco.yaml", overrides)
    encoder = build.model(cfg).encoder_q
    assert memory.parameters(cfg) == sum(p.numel() for p in encoder.parameters())
    assert memory.estimate(cfg).weights == 5 * 4 * memory.parameters(cfg)


@pytest.mark.parametrize("overrides", SMALL_MODELS[::2], ids=lambda o: " ".join(o))
def test_the_activation_term_bounds_what_autograd_keeps_for_the_backward_pass(overrides):
    """The tensors the backward pass keeps (torch.autograd.graph.saved_tensors_hooks, each
    storage once, the weights and the input left out) are at most the estimate, and not far
    below it (the estimate is within 1.5x)."""
    cfg = config.load("digits_moco.yaml", overrides)
    net = encoders.backbone(cfg.model.arch, cfg.model.width, cfg.model.cifar_stem)
    x = torch.randn(2, 3, 64, 64)
    skip = {p.untyped_storage().data_ptr() for p in net.parameters()}
    skip.add(x.untyped_storage().data_ptr())
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in skip:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        net(x).sum()
    estimated = 4 * 2 * 64 * 64 * memory.activations_per_pixel(cfg)
    assert sum(kept.values()) <= estimated <= 1.5 * sum(kept.values())


@pytest.mark.parametrize("path", sorted(config.CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_the_shipped_recipes_fit_their_machines(path):
    """digits, CIFAR and STL-10 on a 24 GiB machine; ImageNet-100 on one 80 GB GPU."""
    cfg = config.load(path.name)
    room = 80e9 if path.name.startswith("imagenet100") else 24 * GIB
    assert memory.estimate(cfg).total <= room


REPROS = [
    ["model.width=1024"],
    ["data.image_size=4096"],
    ["loss.name=fnc", "data.support_views=64", "data.image_size=4096", "data.augment_on=device"],
]


@pytest.mark.parametrize("overrides", REPROS, ids=lambda o: " ".join(o))
def test_a_config_that_cannot_fit_exits_2_naming_the_keys(tmp_path, monkeypatch, overrides):
    monkeypatch.setattr(memory, "available", lambda device: 24 * GIB)  # a 24 GiB machine
    out = tmp_path / "run"
    done = inproc.pretrain("--cfg", "digits_moco.yaml", f"out_dir={out}", *overrides)
    assert done.returncode == 2, done.stderr[-2000:]
    [line] = [s for s in done.stderr.splitlines() if s.startswith("error: ")]
    message = line.removeprefix("error: ")
    cfg = config.load("digits_moco.yaml", overrides)
    need = memory.estimate(cfg).total / GIB
    assert message.startswith(f"the config needs about {need:.1f} GiB and this cpu has 24.0 GiB")
    for key in ("model.width", "train.batch_size", "data.image_size", "data.support_views"):
        assert f"{key}=" in message
    assert_documented(message)
    assert not out.exists()  # refused before the run folder was made


def test_every_rank_stops_when_one_cannot_fit(monkeypatch):
    """A rank with room still stops when another has none (all-reduced), with a message that
    points at the other rank's; it would otherwise wait at its first collective."""
    cfg = config.load("digits_moco.yaml")
    monkeypatch.setattr(memory.dist, "any_rank", lambda flag: True)  # another rank's verdict
    with pytest.raises(config.ConfigError) as info:
        memory.check(cfg, torch.device("cpu"))
    message = str(info.value)
    assert message == (
        "another rank of this job lacks the memory the config needs (its error names the keys "
        "and the estimate)"
    )
    assert_documented(message)
    monkeypatch.setattr(memory.dist, "any_rank", lambda flag: flag)
    memory.check(cfg, torch.device("cpu"))  # the digits recipe fits here
