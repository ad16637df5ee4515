"""``python -m linear_eval --ckpt X``: values that would run but mean nothing are refused with
exit 2 and a message quoted on docs/troubleshooting.md, before the checkpoint is read; ``--k 0``
and ``--temperature 0`` are no longer replaced by the run's settings."""

from __future__ import annotations

import pytest

from linear_eval.__main__ import main
from tests.helpers.troubleshooting_quotes import assert_documented

BAD = [
    ("--epochs", "0"), ("--epochs", "-1"), ("--lr", "nan"), ("--lr", "0"), ("--lr", "inf"),
    ("--temperature", "-0.1"), ("--temperature", "0"), ("--k", "0"), ("--k", "-3"),
    ("--batch-size", "0"), ("--weight-decay", "-1"), ("--num-workers", "-1"),
    ("--probe-batch-size", "0"), ("--threads", "0"),
]  # fmt: skip


@pytest.mark.parametrize(("flag", "value"), BAD, ids=[f"{f}={v}" for f, v in BAD])
def test_meaningless_values_are_refused_before_anything_runs(flag, value, tmp_path, capsys):
    # the checkpoint does not exist: the value must be refused first, with its own message
    assert main(["--ckpt", str(tmp_path / "missing.pt"), flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {flag} {value}"), err
    assert_documented(err.removeprefix("error: "))


SUB = [("ood", "--k", "0"), ("compare", "--k", "-3"), ("all", "--crops", "0"),
       ("limited", "--draws", "0"), ("knn", "--batch-size", "0"), ("knn", "--threads", "0"),
       ("knn", "--num-workers", "-2")]  # fmt: skip


@pytest.mark.parametrize(("cmd", "flag", "value"), SUB, ids=[f"{c}{f}={v}" for c, f, v in SUB])
def test_subcommand_counts_are_refused_before_anything_runs(cmd, flag, value, tmp_path, capsys):
    assert main([cmd, "--ckpt", str(tmp_path / "missing.pt"), flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {flag} {value}"), err
    assert_documented(err.removeprefix("error: "))
