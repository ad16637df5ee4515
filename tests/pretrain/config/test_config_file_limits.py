"""A config file is read within bounds: YAML aliases that nest into millions of values (an "alias
bomb"), a file without end (``/dev/zero``), a named pipe and a file over 1 MiB are refused
with exit 2 naming the file, by ``python -m pretrain`` and by ``python -m slurm`` on a login node,
instead of hanging or running out of memory."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from pretrain import config
from pretrain.config import files
from tests.helpers import inproc
from tests.helpers.inproc import error_line
from tests.helpers.paths import ROOT
from tests.helpers.troubleshooting_quotes import assert_documented


def alias_bomb(levels: int = 10, width: int = 9) -> str:
    """``levels`` anchors, each a list of ``width`` aliases of the one before: width**levels
    values once written out, in a few hundred bytes."""
    lines = [f"a: &a [{', '.join(['x'] * width)}]"]
    for i in range(1, levels + 1):
        prev, name = ("a" if i == 1 else f"a{i - 1}"), f"a{i}"
        lines.append(f"{name}: &{name} [{','.join([f'*{prev}'] * width)}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("module", ["pretrain", "slurm"])
def test_an_alias_bomb_is_refused_quickly_by_pretrain_and_slurm(tmp_path, module):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb())
    assert len(bomb.read_bytes()) < 600
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(  # today's code walked every alias: 9**10 visits, hours
        [sys.executable, "-m", module, "--cfg", str(bomb)],
        capture_output=True, text=True, timeout=30, env=env, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    message = error_line(done.stderr).removesuffix(" (nothing was submitted)")
    assert message == (
        f"{bomb}: its YAML aliases expand to more than {files.MAX_VALUES} values (an alias "
        "repeats its anchor's whole value, so anchors nested in each other multiply); write the "
        "values out, or use fewer aliases"
    )
    assert_documented(message)


def written_out(value: object) -> int:
    """The values of a loaded YAML document walked as a tree (an alias counted each time)."""
    if isinstance(value, list):
        return 1 + sum(written_out(v) for v in value)
    if isinstance(value, dict):
        return 1 + sum(written_out(k) + written_out(v) for k, v in value.items())
    return 1


def test_the_bound_is_on_the_written_out_size():
    """17 levels of 2 aliases write out to just under 2**20 values and parse; 18 are refused."""
    under = alias_bomb(17, 2)
    assert (
        written_out(yaml.safe_load(under))
        <= files.MAX_VALUES
        < 2 * written_out(yaml.safe_load(under))
    )
    assert files.parse_yaml(under, "x.yaml")["a1"] == [["x", "x"], ["x", "x"]]
    with pytest.raises(config.ConfigError, match="aliases expand to more than 1048576 values"):
        files.parse_yaml(alias_bomb(18, 2), "x.yaml")


def test_anchors_and_merge_keys_of_an_ordinary_config_still_load(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "train: &t {epochs: 3, batch_size: 64}\n"
        "eval: {knn_every: 1}\n"
        "moco: {queue_size: 128}\n"
        "data: {mean: &m [0.5, 0.5, 0.5], std: *m}\n"
    )
    loaded = config.load(str(cfg))
    assert loaded.train.epochs == 3 and loaded.data.std == (0.5, 0.5, 0.5)


def test_dev_zero_a_fifo_and_a_file_over_the_cap_exit_2_naming_the_file(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # nobody writes to it: opening it would block for ever
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * files.MAX_BYTES + b"\n")
    expected = {
        "/dev/zero": "config file /dev/zero is not a regular file (a character device); give a "
        "YAML file",
        str(fifo): f"config file {fifo} is not a regular file (a FIFO); give a YAML file",
        str(big): f"config file {big} is larger than 1048576 bytes (1 MiB), the most a config is "
        "read to; give the YAML file of a run's settings (a shipped config is under 4 KiB)",
    }
    for path, message in expected.items():
        done = inproc.pretrain("--cfg", path)
        assert done.returncode == 2, done.stderr[-2000:]
        assert error_line(done.stderr) == message
        assert_documented(message)
    big.write_bytes(b"#" * (files.MAX_BYTES - 1) + b"\n")  # at the cap: read
    assert files.read_text(big).startswith("#")
