"""The README's evaluation commands print the linear probes that its words and the results table
name: the default command (``python -m linear_eval --ckpt``) stores the SGD probe whose
``linear_top1`` the results table and ``linear_eval table`` report, and ``all`` fits the L-BFGS
probe. The commands are read from the README's code block and run on a tiny fake checkpoint
(``all`` is stopped at its linear probe, once the protocol is known)."""

from __future__ import annotations

import json
import re
import shlex

import pytest
import torch
import yaml

from linear_eval.__main__ import main
from linear_eval.classify import probe
from linear_eval.cli import commands
from linear_eval.records.runs import probe_of
from tests.helpers.fakeckpt import make_checkpoint
from tests.helpers.paths import ROOT


def evaluation_lines() -> list[tuple[list[str], str]]:
    """(argv after ``python -m linear_eval``, the comment) of the README's evaluation block."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"Then evaluate the checkpoint:\n\n```bash\n(.*?)```", text, re.S)
    assert block, "README.md lacks its evaluation block"
    out = []
    for line in block.group(1).splitlines():
        command, _, comment = line.partition("#")
        argv = shlex.split(command)
        assert argv[:3] == ["python", "-m", "linear_eval"], line
        out.append((argv[3:], comment.strip()))
    return out


def with_ckpt(argv: list[str], ckpt: str) -> list[str]:
    i = argv.index("--ckpt")
    return [*argv[: i + 1], ckpt, *argv[i + 2 :]]


class Stopped(Exception):
    """Raised by the patched probe: the protocol is known, the rest of ``all`` need not run."""


def test_the_readme_evaluation_commands_print_the_probes_they_and_the_table_name(
    tmp_path, capsys, monkeypatch
):
    lines = evaluation_lines()
    assert [argv[0] for argv, _ in lines] == ["--ckpt", "all"]
    (default, default_says), (every, every_says) = lines
    ckpt = make_checkpoint(tmp_path / "run")

    assert main(with_ckpt(default, str(ckpt))) == 0, capsys.readouterr().err
    stored = json.loads((tmp_path / "run" / "eval" / "linear_eval.json").read_text())
    sgd = probe.PROTOCOLS[probe.DEFAULT_COMMAND]  # the SGD recipe compare defaults to
    assert "SGD" in default_says and sgd.as_dict()["solver"] == "sgd"
    assert (stored["linear"]["epochs"], stored["linear"]["lr"], stored["linear"]["momentum"]) == (
        sgd.epochs,
        sgd.lr,
        probe.MOMENTUM,
    )
    assert stored["linear"]["milestones"] == list(sgd.milestones)
    assert probe_of("linear_eval", stored).startswith("SGD probe of python -m linear_eval --ckpt")
    config = torch.load(ckpt, weights_only=True)["config"]
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump(config))
    capsys.readouterr()
    assert main(["table", str(tmp_path / "run")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        f"linear probe: {probe_of('linear_eval', stored)}"
    )

    seen = []

    def stop(sess, protocol, *args, **kwargs):
        seen.append(protocol)
        raise Stopped

    monkeypatch.setattr(commands.classification, "run_linear", stop)
    with pytest.raises(Stopped):
        main(with_ckpt(every, str(ckpt)))
    assert seen == ["lbfgs"] and "L-BFGS" in every_says and "SGD" not in every_says
