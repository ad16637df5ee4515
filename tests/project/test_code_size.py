"""Every module of ``pretrain/``, ``negatives/``, ``negmine_core/`` and ``linear_eval/`` reads in
one sitting: no function over 80 lines (60 in ``linear_eval/``, whose evaluators, report and
command line read top to bottom) and no module over 450. Triton kernels are the one
exception: a ``@triton.jit`` function is one GPU program, and splitting it would add launches;
the modules that hold them are named below with their reason."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.paths import ROOT

PACKAGES = ("pretrain", "negatives", "negmine_core", "linear_eval")
MAX_FUNCTION, MAX_MODULE = 80, 450
MAX_FUNCTION_IN = {"linear_eval": 60}  # package: its tighter function limit
TRITON_MODULES = {  # module: why it may pass MAX_MODULE (its kernels are single GPU programs)
    "negatives/ocsvm/smo_triton.py": "libsvm's SMO loop as one Triton program",
}


TRITON_JIT = ("triton.jit", "_jit")  # smo_triton.py: _jit = triton.jit


def modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def is_triton_kernel(node: ast.AST) -> bool:
    decorators = getattr(node, "decorator_list", [])
    return any(ast.unparse(d).split("(")[0] in TRITON_JIT for d in decorators)


def function_limit(path: Path, root: Path = ROOT) -> int:
    return MAX_FUNCTION_IN.get(path.relative_to(root).parts[0], MAX_FUNCTION)


def long_functions(path: Path, root: Path = ROOT) -> list[str]:
    limit = function_limit(path, root)
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not is_triton_kernel(node):
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_no_function_over_80_lines():
    found = [f for p in modules() for f in long_functions(p)]
    assert not found, (
        f"functions over {MAX_FUNCTION} lines ({MAX_FUNCTION_IN}; split them): {found}"
    )


def test_linear_eval_is_covered_with_its_tighter_limit():
    """Every module of linear_eval/ is checked, at 60 lines a function."""
    covered = {p.relative_to(ROOT).as_posix() for p in modules()}
    assert "linear_eval/cli/main.py" in covered and "linear_eval/report/figures.py" in covered
    assert function_limit(ROOT / "linear_eval" / "cli" / "main.py") == 60


def test_no_module_over_450_lines():
    found = [
        f"{p.relative_to(ROOT)} ({n} lines)"
        for p in modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE
        and str(p.relative_to(ROOT)) not in TRITON_MODULES
    ]
    assert not found, f"modules over {MAX_MODULE} lines (split them): {found}"


def test_the_allow_list_names_triton_modules_only():
    """An entry must exist and hold Triton kernels, so the list cannot grow into a waiver."""
    for name in TRITON_MODULES:
        path = ROOT / name
        assert path.is_file(), name
        tree = ast.parse(path.read_text())
        assert any(is_triton_kernel(n) for n in ast.walk(tree)), f"{name} holds no Triton kernel"


def test_the_check_finds_a_long_function(tmp_path):
    fake = tmp_path / "pretrain" / "f.py"
    fake.parent.mkdir()
    fake.write_text("def f():\n" + "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION)))
    assert [s.split(" ", 1)[1] for s in long_functions(fake, tmp_path)] == ["f (81 lines)"]
    sixty_one = tmp_path / "linear_eval" / "g.py"
    sixty_one.parent.mkdir()
    sixty_one.write_text("def g():\n" + "".join(f"    x{i} = {i}\n" for i in range(60)))
    assert [s.split(" ", 1)[1] for s in long_functions(sixty_one, tmp_path)] == ["g (61 lines)"]
    assert is_triton_kernel(ast.parse("@triton.jit\ndef k():\n    pass\n").body[0])


MAX_FMT_SKIPS = 10  # hand-aligned tables only: formatting is not a line budget


def fmt_skips(paths: list[Path], root: Path = ROOT) -> list[str]:
    """Each ``# fmt: skip`` / ``# fmt: off`` line of ``paths``, as ``path:line``."""
    return [
        f"{p.relative_to(root)}:{i}"
        for p in paths
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if "# fmt: skip" in line or "# fmt: off" in line
    ]


def test_at_most_ten_fmt_skips_in_the_library():
    paths = [*modules(), *sorted((ROOT / "slurm").rglob("*.py"))]
    found = fmt_skips(paths)
    assert len(found) <= MAX_FMT_SKIPS, f"{len(found)} fmt skips (at most {MAX_FMT_SKIPS}): {found}"


def test_the_fmt_skip_count_finds_each_marker(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("A = {1: 2}  # fmt: skip\nB = 1\n# fmt: off\nC = 3\n")
    assert fmt_skips([mod], tmp_path) == ["m.py:1", "m.py:3"]
