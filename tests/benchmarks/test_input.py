"""benchmarks/input.py's trainer part takes some of its recipes (--trainers: the GPU suite times
cifar10_moco alone to fit its budget) and refuses one it does not time."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.ddp import clean_env
from tests.helpers.paths import ROOT
from tests.helpers.troubleshooting_quotes import assert_documented

HEADING = "`benchmarks/input.py`'s recipes (the GPU suite's budget)"


@pytest.mark.parametrize("value", ["cifar10_moco,nope", ","])
def test_an_unknown_recipe_is_refused_with_a_documented_message(value):
    proc = subprocess.run([sys.executable, "benchmarks/input.py", "--device", "cpu", "--no-record",
                           "--parts", "trainer", "--trainers", value], capture_output=True,
                          text=True, cwd=ROOT, env=clean_env(CUDA_VISIBLE_DEVICES=""),
                          timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = proc.stderr.strip().splitlines()[-1].removeprefix("input.py: error: ")
    assert message == "--trainers: want a comma list of digits_moco, cifar10_moco, imagenet100_moco"
    assert_documented(message, HEADING)
