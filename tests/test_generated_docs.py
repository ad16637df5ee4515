"""Every generator of the docs (scripts/gen_*.py) writes its pages with no arguments and checks
them with ``--check``: the checked-in pages are what the code generates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GENERATORS = sorted((ROOT / "scripts").glob("gen_*.py"))


def test_there_are_generators():
    assert {"gen_config_docs.py", "gen_step_counts.py"} <= {p.name for p in GENERATORS}


@pytest.mark.parametrize("script", GENERATORS, ids=[p.name for p in GENERATORS])
def test_the_pages_are_what_the_generator_writes(script):
    done = subprocess.run([sys.executable, str(script), "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
