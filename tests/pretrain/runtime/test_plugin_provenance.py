"""Provenance records the run's plugins: an installed plugin's distribution
name and version, a file's sha256; ``provenance.json`` and the checkpoint hold them, and
``linear_eval table`` shows them in a column of their own (left out when no run has one)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import torch

import negatives
from linear_eval.cli import table
from negatives import ExtraNegatives, NegativeStrategy, Step
from pretrain import config
from pretrain.engine import loop
from pretrain.runtime import plugin_provenance
from pretrain.testing import steps

TINY = ["model.width=8", "train.batch_size=16", "moco.queue_size=64", "data.num_workers=0",
        "train.progress_bar=false", "train.max_steps=2", "train.log_every=1", "eval.knn_every=0",
        "train.amp='off'"]  # fmt: skip
HERE = Path(__file__).resolve()


class Mine(NegativeStrategy):
    """A plugin's strategy, defined in this file."""

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives()


def test_a_built_in_records_nothing_a_file_its_sha256_an_entry_point_its_dist(monkeypatch):
    group = negatives.strategies.group
    assert plugin_provenance.record("strategy", "mochi", negatives.strategies.get("mochi"),
                                    group) is None  # fmt: skip
    got = plugin_provenance.record("strategy", "mine", Mine, group)
    assert got == {
        "kind": "strategy",
        "name": "mine",
        "class": f"{__name__}.Mine",
        "file": str(HERE),
        "sha256": hashlib.sha256(HERE.read_bytes()).hexdigest(),
    }
    fake = [SimpleNamespace(name="mine", dist=SimpleNamespace(name="my-dist", version="1.2"))]
    monkeypatch.setattr(plugin_provenance.importlib.metadata, "entry_points",
                        lambda group: fake)  # fmt: skip
    got = plugin_provenance.record("strategy", "mine", Mine, group)
    assert (got["dist"], got["version"]) == ("my-dist", "1.2") and "sha256" not in got
    assert plugin_provenance.cell([got]) == "my-dist 1.2"


def test_the_run_and_its_checkpoint_record_the_plugin(tmp_path):
    with steps.registered(Mine) as name:
        cfg = config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *TINY,
                                               f"negatives.name={name}"])  # fmt: skip
        assert loop.main(cfg) == 0
    want = [{"kind": "strategy", "name": name, "class": f"{__name__}.Mine", "file": str(HERE),
             "sha256": hashlib.sha256(HERE.read_bytes()).hexdigest()}]  # fmt: skip
    prov = json.loads((tmp_path / "provenance.json").read_text())
    assert prov["plugins"] == want and prov["segments"][-1]["plugins"] == want
    ckpt = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)
    found = [v for v in ckpt.values() if isinstance(v, dict) and "segments" in v]
    assert found and found[0]["plugins"] == want
    run = table.Run(tmp_path, {}, provenance=prov)
    short = f"test_plugin_provenance.py sha256:{want[0]['sha256'][:12]}"
    assert table.plugins_cell([run]) == short
    assert table.plugins_cell([table.Run(tmp_path, {}, provenance=None)]) == "-"
