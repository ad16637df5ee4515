"""The config-to-object adapters: optimizer groups, queue checks, strategy errors."""

from __future__ import annotations

import pytest
import torch

from pretrain import build, config
from pretrain.config import ConfigError
from pretrain.data import pipeline


def cfg_with(*overrides: str) -> config.Config:
    return config.load("digits_moco.yaml", ["model.width=8", *overrides])


@pytest.mark.parametrize("exclude", [False, True])
def test_weight_decay_groups(exclude):
    cfg = cfg_with(f"train.wd_exclude_bias_and_norm={str(exclude).lower()}")
    moco = build.model(cfg)
    opt = build.optimizer(moco.encoder_q, 0.1, cfg)
    params = list(moco.encoder_q.parameters())
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    expected = {id(p) for p in params if p.ndim > 1 or not exclude}
    assert decayed == expected
    assert sum(len(g["params"]) for g in opt.param_groups) == len(params)
    assert all(g["lr"] == 0.1 and g["momentum"] == cfg.train.sgd_momentum for g in opt.param_groups)
    assert not any(p is k for p in params for k in moco.encoder_k.parameters())


def test_queue_larger_than_training_set_is_refused():
    with pytest.raises(ConfigError, match=r"moco.queue_size \(2000\) exceeds the training set"):
        build.queue(cfg_with("moco.queue_size=2000"), train_size=1437)


def test_queue_smaller_than_batch_is_refused():
    with pytest.raises(ConfigError, match=r"smaller than the global batch \(64\)"):
        build.queue(cfg_with("moco.queue_size=32"), train_size=1437)


def test_unknown_strategy_is_a_config_error():
    """A static rule, so config.validate raises it (the names come from the registry)."""
    with pytest.raises(
        ConfigError,
        match=r"'negatives.name' is 'nope'; expected one of adco, .*\(did you mean 'none'\?\)",
    ):
        cfg_with("negatives.name=nope")


def test_strategy_kwargs_are_checked():
    with pytest.raises(ConfigError, match="bad arguments for negative strategy 'none'"):
        config.load("digits_moco.yaml", ["negatives.kwargs={bogus: 1}"])
    with pytest.raises(ConfigError, match=r"no argument 'nuu' \(did you mean 'nu'\?\); valid: "):
        config.load("digits_mioc.yaml", ["negatives.kwargs.nuu=0.1"])


def test_eval_transform_is_deterministic_and_train_transform_is_not():
    cfg = cfg_with()
    image = torch.randint(0, 256, (3, 16, 16), dtype=torch.uint8)
    ev = pipeline.eval_transform(cfg.data)
    assert torch.equal(ev(image), ev(image))
    expected = (image.float() / 255 - 0.5) / 0.5  # 16 px digits: resize/crop to 16 is identity
    assert torch.allclose(ev(image), expected, atol=1e-6)
    tr = pipeline.train_transform(cfg.data)
    torch.manual_seed(0)
    a = tr(image)
    assert a.shape == (3, 16, 16) and not torch.equal(a, tr(image))


def test_hard_set_larger_than_queue_fails_at_setup_not_after_warmup():
    cfg = config.load("digits_mochi.yaml", ["negatives.kwargs={num_hard: 1024, warmup_epochs: 10}"])
    with pytest.raises(ConfigError, match=r"num_hard=1024 exceeds the queue size K=256"):
        build.strategy(cfg)


def test_kwargs_override_merges_into_the_files_kwargs():
    cfg = config.load("digits_mioc.yaml", ["negatives.kwargs.nu=0.1"])
    assert cfg.negatives.kwargs == {"num_synthetic": 64, "num_inlier_synthetic": 32, "nu": 0.1,
                                    "gamma": 0.01, "warmup_epochs": 3.0}  # fmt: skip


def test_the_pipeline_is_chosen_in_one_place(monkeypatch):
    """pipeline.choose: a CPU run reads through the loader unless data.resident=device asks for
    the resident split; auto on CUDA holds the split when it fits in the free memory, and falls
    to the loader (no image files: no device decode) when it does not."""
    cfg = cfg_with()
    splits = pipeline.read_splits(build.data_settings(cfg))
    assert pipeline.choose(cfg.data, "cpu", splits) == "loader"
    assert pipeline.choose(cfg_with("data.resident=device").data, "cpu", splits) == "resident"
    assert pipeline.choose(cfg_with("data.resident=device").data, "cpu", splits, False) == "loader"
    assert pipeline.choose(cfg_with("data.augment_on=workers").data, "cuda", splits) == "loader"
    free = {"bytes": 1 << 40}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (free["bytes"], 0))
    assert pipeline.choose(cfg.data, "cuda", splits) == "resident"
    free["bytes"] = 1000  # a few images' worth
    assert pipeline.choose(cfg.data, "cuda", splits) == "loader"
