"""Every shipped config loads, validates and builds its model; CIFAR and ImageNet-100 configs run
an epoch on tiny data written in the true on-disk format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pretrain import build, config
from pretrain.testing.fakedata import write_cifar10, write_imagenet100
from tests.helpers import inproc

SHIPPED = sorted(p.name for p in config.CONFIG_DIR.glob("*.yaml"))
SHRINK = [
    "model.arch=resnet_small",
    "model.width=8",
    "train.epochs=1",
    "train.batch_size=32",
    "moco.queue_size=64",
    "data.num_workers=0",
    "train.progress_bar=false",
]


def test_the_foundation_configs_are_shipped():
    expected = {
        "digits_moco.yaml",
        "cifar10_moco.yaml",
        "cifar100_moco.yaml",
        "stl10_moco.yaml",
        "imagenet100_moco.yaml",
    }
    assert expected <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_config_loads_and_builds(name):
    cfg = config.load(name)
    assert cfg.out_dir == f"runs/{Path(name).stem}"
    moco = build.model(cfg)
    assert sum(p.numel() for p in moco.encoder_q.parameters()) > 0
    assert build.loss_fn(cfg, num_classes=10).temperature == cfg.moco.temperature


def test_paper_settings():
    im = config.load("imagenet100_moco.yaml")
    assert (im.model.arch, im.moco.queue_size, im.moco.momentum, im.moco.temperature) == (
        "resnet50",
        16384,
        0.999,
        0.2,
    )
    assert im.model.mlp and im.train.epochs == 200 and im.train.weight_decay == 1e-4
    c10 = config.load("cifar10_moco.yaml")
    assert (c10.model.arch, c10.model.cifar_stem, c10.model.bn_splits) == ("resnet18", True, 8)
    assert (c10.moco.queue_size, c10.moco.momentum, c10.moco.temperature) == (4096, 0.99, 0.1)
    assert (c10.eval.knn_k, c10.eval.knn_temperature) == (200, 0.1)


def run_one_epoch(cfg_name: str, root: Path, out: Path, *extra: str) -> dict:
    """The recipe shrunk, one epoch through ``python -m pretrain`` in this process
    (``tests/helpers/inproc.py``); its last metrics record."""
    args = ["--cfg", cfg_name, f"data.root={root}", f"out_dir={out}", *SHRINK, *extra]
    done = inproc.pretrain(*args)
    assert done.returncode == 0, done.stderr
    last = (out / "metrics.jsonl").read_text().splitlines()[-1]
    return json.loads(last)


@pytest.mark.parametrize("name", ["cifar10_moco.yaml", "cifar10_moco_sym.yaml"])
def test_cifar10_config_runs_on_cifar_pickles(tmp_path, name):
    write_cifar10(tmp_path / "data", per_batch=16)
    record = run_one_epoch(name, tmp_path / "data", tmp_path / "run")
    assert record["kind"] == "epoch" and record["epoch"] == 1 and "knn_top1" in record


def test_imagenet100_config_runs_on_an_imagefolder(tmp_path):
    write_imagenet100(tmp_path / "in100")
    record = run_one_epoch(
        "imagenet100_moco.yaml",
        tmp_path / "in100",
        tmp_path / "run",
        "data.image_size=32",
        "data.eval_resize=32",
    )
    assert record["kind"] == "epoch" and "knn_top1" in record
