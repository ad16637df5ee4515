"""Registration faults are local and clear: an installed plugin that claims a
built-in's name stops only the runs that use that name (exit 2, no traceback), and every other run
goes on with one warning naming both classes; a relative ``plugins:`` file resolves beside the
YAML file first, and "no such file" shows the paths tried; a name the run (its provenance.json, or
a checkpoint's) recorded as a plugin is "not installed", naming that plugin, before any "did you
mean"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import negatives
from pretrain import config
from pretrain.config import ConfigError
from tests.helpers.paths import ROOT

CLASH = """
import importlib.metadata as m, runpy, sys
real = m.entry_points
fake = [m.EntryPoint("infonce", "json:JSONDecoder", "negmine.losses")]
m.entry_points = lambda group=None, **k: (fake if group == "negmine.losses"
                                          else real(group=group, **k))
sys.argv = ["pretrain", "--cfg", "digits_moco.yaml", *sys.argv[1:]]
runpy.run_module("pretrain", run_name="__main__")
"""
TINY = ["train.max_steps=1", "model.width=8", "eval.knn_every=0", "train.progress_bar=false",
        "data.num_workers=0"]  # fmt: skip


def run(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", CLASH, f"out_dir={tmp_path / 'run'}", *TINY,
                           *overrides], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)  # fmt: skip


def test_a_name_clash_stops_only_the_runs_that_use_the_name(tmp_path):
    infonce = ROOT / "pretrain" / "losses" / "infonce.py"
    both = ("loss 'infonce' is already registered: claimed by pretrain.losses.infonce.InfoNCE "
            f"({infonce}) and by json.decoder.JSONDecoder")  # fmt: skip
    other = run(tmp_path, "loss.name=supcon")
    assert other.returncode == 0, other.stderr[-3000:]
    assert other.stderr.count(f"warning: {both}") == 1, other.stderr[-3000:]
    assert "runs that use 'infonce' stop with this error; other runs go on" in other.stderr
    (tmp_path / "b").mkdir()
    same = run(tmp_path / "b")
    assert same.returncode == 2, same.stderr[-3000:]
    assert f"error: config key 'loss.name': {both}" in same.stderr
    assert "Traceback" not in same.stderr


def test_a_relative_plugin_file_resolves_beside_the_yaml_then_the_paths_tried(
    tmp_path, monkeypatch
):
    folder, elsewhere = tmp_path / "cfgs", tmp_path / "cwd"
    (folder / "plugins").mkdir(parents=True)
    elsewhere.mkdir()
    (folder / "plugins" / "mine.py").write_text(
        "from negatives import NegativeStrategy, register\n\n"
        "@register('beside_yaml')\nclass Beside(NegativeStrategy):\n    pass\n"
    )
    recipe = (config.CONFIG_DIR / "digits_moco.yaml").read_text()
    (folder / "run.yaml").write_text(recipe + "\nplugins: [plugins/mine.py]\n")
    monkeypatch.chdir(elsewhere)
    # the file registers its strategy: in a copy of the registry, restored after the test
    monkeypatch.setattr(negatives.strategies, "_classes", dict(negatives.strategies._classes))
    cfg = config.load(str(folder / "run.yaml"), ["negatives.name=beside_yaml"])
    assert cfg.plugins == [str(folder / "plugins" / "mine.py")]
    (folder / "bad.yaml").write_text(recipe + "\nplugins: [nope/absent.py]\n")
    with pytest.raises(ConfigError) as e:
        config.load(str(folder / "bad.yaml"))
    assert str(e.value) == (
        "config key 'plugins' in the config: plugin 'nope/absent.py': no such file (tried "
        f"{folder / 'nope' / 'absent.py'}, {elsewhere / 'nope' / 'absent.py'})"
    )


def test_every_unknown_name_is_reported_not_installed_before_did_you_mean():
    with pytest.raises(ConfigError) as e:
        config.load("digits_moco.yaml", ["negatives.name=nonee", "loss.name=unif_loss"])
    first, second = str(e.value).split("; config key ")
    want = ("config key 'loss.name' is 'unif_loss': not installed here: no loss of that name is "
            "built in or installed (install the plugin's package, or name its file in plugins: "
            "[...]); installed: ")  # fmt: skip
    assert first.startswith(want), first
    assert second.startswith("'negatives.name' is 'nonee'; expected one of ")
    assert second.endswith("(did you mean 'none'?)"), second
    with pytest.raises(ConfigError, match=r"^config key 'negatives.name' is 'hard_topk': not "
                       r"installed here: no negative strategy of that name"):  # fmt: skip
        config.load("digits_moco.yaml", ["negatives.name=hard_topk"])


RECORDS = [
    {"kind": "loss", "name": "infonce2", "class": "pkg.Loss", "dist": "negmine-example-plugin",
     "version": "0.1.0"},
    {"kind": "strategy", "name": "mochii", "class": "mine.Mine", "file": "/elsewhere/mine.py",
     "sha256": "ab" * 32},
]  # fmt: skip


def test_a_name_the_run_recorded_is_not_installed_naming_its_plugin_before_did_you_mean(tmp_path):
    """Resuming a run trained with a plugin that is not installed now: its names are close to
    built-ins ('infonce', 'mochi'), yet the run's provenance says they were plugins."""
    names = ["loss.name=infonce2", "negatives.name=mochii"]
    with pytest.raises(ConfigError, match=r"did you mean 'infonce'\?\)$"):
        config.load("digits_moco.yaml", [f"out_dir={tmp_path}", "loss.name=infonce2"])
    (tmp_path / "provenance.json").write_text(json.dumps({"plugins": RECORDS}))
    with pytest.raises(ConfigError) as e:
        config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *names])
    assert str(e.value) == (
        f"config key 'negatives.name' is 'mochii': not installed here: the run in {tmp_path} "
        "trained with the plugin mine.py sha256:abababababab (install it, or name its file in "
        f"plugins: [...]); config key 'loss.name' is 'infonce2': not installed here: the run in "
        f"{tmp_path} trained with the plugin negmine-example-plugin 0.1.0 (install it, or name "
        "its file in plugins: [...])"
    ), str(e.value)
    with pytest.raises(ConfigError) as e:  # an unrecorded typo beside a recorded plugin
        config.load("digits_moco.yaml", [f"out_dir={tmp_path}", "loss.name=infonce2",
                                         "negatives.name=nonee"])  # fmt: skip
    first, second = str(e.value).split("; config key ")
    want = (f"config key 'loss.name' is 'infonce2': not installed here: the run in {tmp_path} "
            "trained with the plugin negmine-example-plugin")  # fmt: skip
    assert first.startswith(want), first
    assert second.startswith("'negatives.name' is 'nonee'; expected") and "did you mean" in second


def test_evaluating_a_checkpoint_names_the_plugin_it_recorded(capsys):
    raw = config.to_dict(config.load("digits_moco.yaml"))
    raw["negatives"]["name"] = "mochii"
    config.from_dict(raw, source="ck.pt (config)", encoder_only=True, records=RECORDS)
    assert ("warning: ck.pt (config): trained with negative strategy 'mochii' (a plugin not "
            "installed here; the run used mine.py sha256:abababababab); the encoder does not need "
            "it: evaluation and export go on without it") in capsys.readouterr().err  # fmt: skip
