"""``python -m linear_eval --ckpt X`` on the subcommands' path: the flags every subcommand takes
mean the same there (``--batch-size`` is the feature extraction batch, ``--device``,
``--threads``; the probe's SGD batch is ``--probe-batch-size``), and its results file is written
by the subcommands' writer, so it carries their header."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from linear_eval.__main__ import main
from linear_eval.cli.main import DEFAULT, common, parser
from tests.helpers.fakeckpt import make_checkpoint


def subparsers() -> dict[str, argparse.ArgumentParser]:
    top = parser()
    return next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices


def flags(p: argparse.ArgumentParser) -> dict[str, tuple]:
    """Each option string of ``p``: what it stores, its default, type, and help."""
    return {
        s: (a.dest, a.default, a.type, a.help, a.nargs)
        for a in p._actions
        for s in a.option_strings
        if s not in ("-h", "--help")
    }


def test_the_default_command_takes_every_common_flag_with_its_meaning():
    """The reference is the common parser every checkpoint subcommand is built on."""
    shared = flags(common())
    assert {"--device", "--threads", "--batch-size"} <= shared.keys()
    subs = subparsers()
    default = flags(subs[DEFAULT])
    for name in ("linear", "knn", DEFAULT):
        assert {k: v for k, v in flags(subs[name]).items() if k in shared} == shared, name
    assert default["--probe-batch-size"][:2] == ("probe_batch_size", 256)  # moco's probe batch
    assert "--probe-batch-size" not in flags(subs["knn"])


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("run"))


def test_the_default_command_runs_on_the_common_flags_and_writes_as_subcommands_do(ckpt, capsys):
    quick = ["--epochs", "1", "--milestones", "1", "--no-cache", "--device", "cpu"]
    assert main(["--ckpt", str(ckpt), *quick, "--threads", "1", "--batch-size", "7"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["linear"]["batch_size"] == 256  # --batch-size 7 went to the extraction, not here
    assert main(["knn", "--ckpt", str(ckpt), "--presets", "cifar", "--no-cache"]) == 0
    capsys.readouterr()
    eval_dir = ckpt.parent.parent / "eval"
    default = json.loads((eval_dir / "linear_eval.json").read_text())
    knn = json.loads((eval_dir / "knn.json").read_text())
    header = set(knn) - {"variants", "distance"}  # the knn record's own keys
    assert header <= set(default), header - set(default)
    assert default["evaluator"] == "linear_eval" and knn["evaluator"] == "knn"
    for key in ("arch", "intervals", "in_classes", "test_set", "epoch"):
        assert default[key] == knn[key], key
