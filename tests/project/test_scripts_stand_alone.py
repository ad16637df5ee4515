"""The scripts, benchmarks and examples run from an installed negmine alone: none of them puts
``tests/`` on ``sys.path`` or imports one of the suite's modules, so what they need (the pins, the
fake-data recipe, the counters) is library code the suite uses too, and cannot drift from it."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.paths import ROOT

OUTSIDE = ("scripts", "benchmarks", "examples", "pretrain", "negatives", "negmine_core",
           "linear_eval", "slurm")  # fmt: skip
SUITE = {p.stem for p in (ROOT / "tests").rglob("*.py")} | {"tests"}


def faults(path: Path) -> list[str]:
    """Where ``path`` reaches into the suite: a ``sys.path`` entry naming tests, an import of
    ``tests`` or of a module that only the suite's folder holds."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("sys.path.insert"):
            if "tests" in ast.unparse(node):
                found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            local = (path.parent / f"{top}.py").exists() or (path.parent / top).is_dir()
            if top == "tests" or (top in SUITE and not local):
                found.append(f"{path}:{node.lineno}: import {name}")
    return sorted(found, key=lambda f: int(f.split(":")[1]))


def test_no_script_outside_tests_reaches_into_the_suite():
    found = [f for d in OUTSIDE for p in sorted((ROOT / d).rglob("*.py")) for f in faults(p)]
    assert found == []


def test_the_check_sees_a_script_that_puts_tests_on_the_path(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('import sys\nsys.path.insert(0, str(ROOT / "tests"))\nimport op_table\n')
    assert [f.split(": ", 1)[1] for f in faults(bad)] == [
        "sys.path.insert(0, str(ROOT / 'tests'))",
        "import op_table",
    ]
