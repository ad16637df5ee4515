"""Evaluation and export need only the encoder: an old checkpoint
whose config carried an inert moved loss setting, a loss setting this version would refuse, or
a loss whose name a plugin claims twice all load their encoder; the moved setting is migrated
only where the saved loss takes it. Two plugins claiming one strategy name are a config error
naming it, not a traceback, whatever its kwargs."""

from __future__ import annotations

import pytest

import negatives
from linear_eval.inputs.checkpoints import load_model
from pretrain import config, losses
from pretrain.config import ConfigError
from pretrain.runtime import checkpoint_io
from tests.helpers.fakeckpt import make_checkpoint
from tests.helpers.troubleshooting_quotes import assert_documented

CLAIMED = "loss 'infonce' is already registered: claimed by A.Mine (a.py) and by B.Mine (b.py)"


def edited(tmp_path, **loss_keys) -> object:
    ckpt = make_checkpoint(tmp_path / "run")
    state = checkpoint_io.load(ckpt)
    state["config"]["loss"].update(loss_keys)
    checkpoint_io.save(state, ckpt)
    return ckpt


@pytest.mark.parametrize(
    ("old", "why"),
    [({"cider_alpha": 0.5}, "loss 'infonce' does not take it"),
     ({"kappa_lambda_align": 0.1}, "the model has no kappa head")],
)  # fmt: skip
def test_an_inert_old_loss_setting_is_dropped_and_the_checkpoint_evaluates(
    tmp_path, old, why, capsys
):
    ckpt = edited(tmp_path, **old)
    model = load_model(ckpt)
    [key] = old
    [message] = capsys.readouterr().err.splitlines()  # one plain line, no UserWarning's source
    assert message.startswith("note: ")
    message = message.removeprefix("note: ")
    assert message == (
        f"{ckpt} (config): an older config, migrated: loss.{key} dropped ({why}: it had no effect)"
    )
    assert_documented(message)
    assert model.cfg.loss.kwargs == {}
    cfg = config.from_dict(checkpoint_io.load(ckpt)["config"], source="x")  # a resume reads it too
    assert cfg.loss.kwargs == {}


def test_a_moved_setting_the_saved_loss_takes_is_still_migrated(capsys):
    raw = config.to_dict(config.load("digits_cider.yaml"))
    raw["loss"] = {k: v for k, v in raw["loss"].items() if k != "kwargs"} | {"cider_alpha": 0.5}
    cfg = config.from_dict(raw, source="cider.pt (config)")
    assert capsys.readouterr().err == (
        "note: cider.pt (config): an older config, migrated: loss.cider_alpha -> "
        "loss.kwargs.alpha\n"
    )
    assert cfg.loss.kwargs["alpha"] == 0.5


def test_evaluation_ignores_loss_settings_and_a_loss_claimed_twice(tmp_path, monkeypatch, capsys):
    ckpt = edited(tmp_path, kwargs={"no_such_setting": 1})
    assert load_model(ckpt).cfg.loss.kwargs == {"no_such_setting": 1}  # kept as the record
    with pytest.raises(ConfigError, match="no argument 'no_such_setting'"):
        config.from_dict(checkpoint_io.load(ckpt)["config"], source="x")  # training still refuses
    plain = make_checkpoint(tmp_path / "run2")
    losses.registry.names()  # the entry points scanned first
    monkeypatch.setitem(losses.registry._problems, "infonce", CLAIMED)
    capsys.readouterr()
    load_model(plain)
    err = capsys.readouterr().err
    assert f"trained with {CLAIMED}; the encoder does not need it" in err, err


def test_a_name_claimed_twice_keeps_which_plugin_the_run_used(tmp_path, monkeypatch, capsys):
    """F04: the checkpoint's provenance names the plugin its loss came from; with that name
    claimed twice here, the warning said only the clash and lost which plugin the run used."""
    ckpt = make_checkpoint(tmp_path / "run")
    state = checkpoint_io.load(ckpt)
    record = {"kind": "loss", "name": "infonce", "class": "a.Mine", "file": "/p/mine.py",
              "sha256": "ab" * 32}  # fmt: skip
    state["provenance"] = {"plugins": [record]}
    checkpoint_io.save(state, ckpt)
    losses.registry.names()  # the entry points scanned first
    monkeypatch.setitem(losses.registry._problems, "infonce", CLAIMED)
    capsys.readouterr()
    load_model(ckpt)
    [line] = [s for s in capsys.readouterr().err.splitlines() if s.startswith("warning: ")]
    assert line == (
        f"warning: {ckpt} (config): trained with {CLAIMED} (the run used mine.py "
        "sha256:abababababab); the encoder does not need it: evaluation and export go on without "
        "it"
    )


def test_a_strategy_claimed_twice_with_kwargs_is_a_config_error(monkeypatch):
    negatives.strategies.names()
    why = "negative strategy 'mochi' is already registered: claimed by A.M (a.py) and by B.M (b.py)"
    monkeypatch.setitem(negatives.strategies._problems, "mochi", why)
    with pytest.raises(ConfigError) as info:
        config.load("digits_moco.yaml", ["negatives.name=mochi", "negatives.kwargs.num_mix=8"])
    assert str(info.value) == f"config key 'negatives.name': {why}"
