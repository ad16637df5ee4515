"""The quick subset (``python -m pytest -m quick``, tests/conftest.py QUICK_FILES) stays a real
first check: its files exist, ``-m quick`` selects their tests and no others, and they exercise
every package the project ships (pretrain, negatives, linear_eval, slurm)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from tests import conftest
from tests.helpers.paths import TESTS

PACKAGES = ("pretrain", "negatives", "linear_eval", "slurm")


def _imports(path: Path) -> set[str]:
    """The top-level packages a test file imports."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def test_the_listed_files_exist_and_cover_every_package():
    missing = [f for f in conftest.QUICK_FILES if not (TESTS / f).is_file()]
    assert not missing, f"QUICK_FILES names files that do not exist: {missing}"
    assert len(set(conftest.QUICK_FILES)) == len(conftest.QUICK_FILES)
    covered = set().union(*(_imports(TESTS / f) for f in conftest.QUICK_FILES))
    assert set(PACKAGES) <= covered, f"no quick test imports {set(PACKAGES) - covered}"


def test_marker_selects_the_listed_files_only():
    """Collect -m quick over the quick files and one file that is not listed: every listed file
    contributes tests, the other none."""
    other = "pretrain/runtime/test_ddp.py"
    assert other not in conftest.QUICK_FILES
    files = [str(TESTS / f) for f in (*conftest.QUICK_FILES, other)]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "quick", "-p",
         "no:cacheprovider", *files],
        capture_output=True, text=True, timeout=600, cwd=TESTS.parent,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    ids = [line for line in run.stdout.splitlines() if "::" in line]
    per_file: dict[str, int] = {}
    for nodeid in ids:
        path = re.sub(r"^tests/", "", nodeid.split("::")[0])
        per_file[path] = per_file.get(path, 0) + 1
    assert set(per_file) == set(conftest.QUICK_FILES), sorted(per_file)
    assert len(ids) >= 300
    m = re.search(r"(\d+)/(\d+) tests collected \((\d+) deselected\)", run.stdout)
    assert m and int(m.group(3)) > 0, run.stdout[-500:]  # test_ddp.py's, deselected


def test_a_quick_test_that_starts_a_process_is_skipped(tmp_path):
    """Under -m quick (and only there) a test that starts a process skips; the others run."""
    (tmp_path / "test_probe_quick.py").write_text(
        "import multiprocessing, subprocess, sys, pytest\n"
        "pytestmark = pytest.mark.quick\n"
        "def test_subprocess():\n"
        "    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
        "def test_multiprocessing():\n"
        "    p = multiprocessing.get_context('spawn').Process(target=print)\n"
        "    p.start()\n"
        "    p.join()\n"
        "def test_in_process():\n"
        "    assert sum([1, 2]) == 3\n"
    )
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent)}  # never tests/: it has a pretrain/
    outcome = {}
    for marks in ("quick", "not slow"):
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-m", marks, "-q", "-rs",
             "-p", "no:cacheprovider", "test_probe_quick.py"],
            capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env,
        )  # fmt: skip
        outcome[marks] = run.stdout
    assert "1 passed, 2 skipped" in outcome["quick"], outcome["quick"][-1500:]
    assert re.search(r"SKIPPED \[2\] .*starts a process", outcome["quick"]), outcome["quick"]
    assert "3 passed" in outcome["not slow"], outcome["not slow"][-1500:]
