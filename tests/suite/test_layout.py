"""``tests/`` mirrors the packages: a test sits in the folder of what it tests (``tests/pretrain/
data/`` for ``pretrain/data/``, ``tests/docs/`` for the pages and their generators,
``tests/benchmarks/``, ``tests/scripts/``, ``tests/project/`` for the tree as a whole,
``tests/suite/`` for the suite's own rules), its name says its subject (never an audit round), and
what several tests share lives once, in ``tests/helpers/``: no test module imports another, and no
helper is copied into a second file."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.paths import ROOT, TESTS

PACKAGES = ("pretrain", "negatives", "linear_eval", "slurm", "negmine_core")
OTHER = ("docs", "benchmarks", "scripts", "project", "suite")  # folders named for no package
HELPERS = "helpers"
BANNED = ("round", "audit")  # a name says what a test checks, not when it was written


def _py(tests: Path) -> list[Path]:
    return sorted(p for p in tests.rglob("*.py") if "__pycache__" not in p.parts)


def imports_of_tests(tests: Path) -> list[str]:
    """Every import of a test module (``test_*``), in a test or a helper."""
    found = []
    for path in _py(tests):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            if any(part.startswith("test_") for n in names for part in n.split(".")):
                found.append(f"{path.relative_to(tests)}:{node.lineno}: {ast.unparse(node)}")
    return found


def misplaced(tests: Path, root: Path) -> list[str]:
    """Files and folders outside the layout: a helper (not ``test_*``, ``conftest``,
    ``__init__``) outside ``helpers/``, a test at the top, a folder named for no package or room
    (``tests/pretrain/X/`` needs ``pretrain/X/``), a folder without ``__init__.py`` (two test files
    of one name in two folders need their packages' names to differ)."""
    found = []
    for path in _py(tests):
        rel = path.relative_to(tests)
        test = path.name.startswith("test_")
        if not test and path.stem not in ("conftest", "__init__") and rel.parts[0] != HELPERS:
            found.append(f"{rel}: a helper outside tests/{HELPERS}/")
        if test and len(rel.parts) == 1:
            found.append(f"{rel}: a test at the top of tests/, not in its package's folder")
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        rel = folder.relative_to(tests)
        top = rel.parts[0]
        if top not in (*PACKAGES, *OTHER, HELPERS):
            found.append(f"{rel}/: names no package (nor one of {', '.join(OTHER)}, {HELPERS})")
        elif top in PACKAGES and not (root / rel).is_dir():
            found.append(f"{rel}/: {rel} is no folder of the package")
        if not (folder / "__init__.py").is_file():
            found.append(f"{rel}/: no __init__.py")
    return found


def audit_names(tests: Path) -> list[str]:
    return [
        str(p.relative_to(tests))
        for p in _py(tests)
        if p.name.startswith("test_") and any(w in p.stem for w in BANNED)
    ]


def copied_functions(tests: Path, min_nodes: int = 25) -> list[list[str]]:
    """Functions (not tests) of one body and signature in two places, whatever their names and
    docstrings: a helper copied instead of imported."""
    seen: dict[str, list[str]] = {}
    for path in _py(tests):
        for node in ast.parse(path.read_text(), str(path)).body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("test_"):
                continue
            body = node.body
            if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]  # the docstring
            code = ast.Module(body=body, type_ignores=[])
            if sum(1 for _ in ast.walk(code)) < min_nodes:
                continue  # a one-liner may well be written twice
            key = ast.dump(node.args) + ast.dump(code)
            seen.setdefault(key, []).append(f"{path.relative_to(tests)}:{node.name}")
    return [places for places in seen.values() if len(places) > 1]


def test_no_test_module_imports_another():
    assert imports_of_tests(TESTS) == []


def test_every_file_and_folder_is_where_the_layout_puts_it():
    assert misplaced(TESTS, ROOT) == []


def test_no_test_file_is_named_after_an_audit_round():
    assert audit_names(TESTS) == []


def test_no_helper_is_copied_into_a_second_file():
    assert copied_functions(TESTS) == []


HELPER = """
def unit(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(*shape, generator=g), dim=-1)
"""


def test_the_checks_see_each_fault(tmp_path):
    """A tree with one of each fault: every check names it (and only it)."""
    tests, root = tmp_path / "tests", tmp_path
    for folder in ("helpers", "pretrain", "pretrain/losses", "pretrain/nowhere", "misc"):
        (tests / folder).mkdir(parents=True, exist_ok=True)
        (tests / folder / "__init__.py").write_text("")
    (root / "pretrain" / "losses").mkdir(parents=True)
    (tests / "__init__.py").write_text("")
    (tests / "helpers" / "vectors.py").write_text(HELPER)
    (tests / "pretrain" / "losses" / "test_a.py").write_text(HELPER.replace("unit", "draw"))
    (tests / "pretrain" / "losses" / "test_b.py").write_text(
        "from tests.pretrain.losses.test_a import draw\nimport test_a\n"
        "from tests.pretrain.losses import test_a as other\nfrom tests.helpers import vectors\n"
    )
    (tests / "pretrain" / "losses" / "test_loss_round3.py").write_text("")
    (tests / "pretrain" / "losses" / "shared.py").write_text("")
    (tests / "test_top.py").write_text("")
    (tests / "docs").mkdir()  # no __init__.py
    assert [f.split(": ", 1)[1] for f in imports_of_tests(tests)] == [
        "from tests.pretrain.losses.test_a import draw",
        "import test_a",
        "from tests.pretrain.losses import test_a as other",
    ]
    assert misplaced(tests, root) == [
        "pretrain/losses/shared.py: a helper outside tests/helpers/",
        "test_top.py: a test at the top of tests/, not in its package's folder",
        "docs/: no __init__.py",
        "misc/: names no package (nor one of docs, benchmarks, scripts, project, suite, helpers)",
        "pretrain/nowhere/: pretrain/nowhere is no folder of the package",
    ]
    assert audit_names(tests) == ["pretrain/losses/test_loss_round3.py"]
    assert copied_functions(tests) == [
        ["helpers/vectors.py:unit", "pretrain/losses/test_a.py:draw"]
    ]
