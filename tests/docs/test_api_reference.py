"""The API reference (docs/api.md) documents what the plugin page tells authors to import (the
contract kit ``pretrain.testing`` included), lists its modules in words so that the file reads
on GitHub too, and the built page shows the docstrings' cross-references as links, not as
literal Sphinx roles (``:meth:`x```), which mkdocstrings does not render."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT

API = (ROOT / "docs" / "api.md").read_text()
PLUGINS = (ROOT / "docs" / "plugins.md").read_text()
# the modules the `:::` directives render, and each one's `members:` list where it has one
RENDERED = re.findall(r"^::: (\S+)\n(?:    options:\n      members: \[([^\]]*)\])?", API, re.M)
ROLE = re.compile(r":(?:meth|class|func|mod|data|attr|exc|obj):`")


def _rendered() -> dict[str, set[str] | None]:
    """Module -> the members it renders (None: all its public ones)."""
    return {m: ({x.strip() for x in ms.split(",")} if ms else None) for m, ms in RENDERED}


def _documents(module: str, name: str) -> bool:
    members = _rendered().get(module, set())
    return members is None or name in members


def test_the_plugin_pages_imports_are_documented():
    """Every ``from X import a, b`` of docs/plugins.md names a module the reference renders, with
    those members, and the contract kit and the contract types are there."""
    imports = re.findall(r"^from ([\w.]+) import ([\w, ]+)$", PLUGINS, re.M)
    assert imports, "docs/plugins.md imports nothing: the pattern above is stale"
    for module, names in imports:
        assert module in _rendered(), f"docs/api.md does not render {module}"
        for name in (n.strip() for n in names.split(",")):
            assert _documents(module, name), f"docs/api.md renders {module} without {name}"
    for module in ("pretrain.testing", "negmine_core.step", "negmine_core.contract"):
        assert module in _rendered(), f"docs/api.md does not render {module}"
    assert _documents("negatives", "NegativeStrategy") and _documents("pretrain.losses", "Loss")
    kit = {"check_strategy", "check_loss", "parametrize_with_checks"}
    assert kit <= (_rendered().get("pretrain.testing.kit") or kit)


def test_the_reference_names_its_modules_in_words():
    """Outside the built site a `:::` line is all one sees: the intro's list names every module
    the page renders, each with a line of what it is for."""
    intro = API[: API.index("\n## ")]
    listed = set(re.findall(r"^- `([\w.]+)`: \w", intro, re.M))
    rendered = {m for m in _rendered() if m.count(".") < 3}
    missing = {m for m in rendered if m not in listed and m.rsplit(".", 1)[0] not in listed}
    assert not missing, f"docs/api.md's list of modules lacks {sorted(missing)}"


def test_the_built_page_has_no_literal_sphinx_roles(tmp_path):
    pytest.importorskip("mkdocstrings", reason='the docs extra is not installed (".[docs]")')
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", tmp_path]
    run = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=110,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    page = (tmp_path / "api" / "index.html").read_text()
    text = re.sub(r"<[^>]+>", "", page)
    roles = [text[max(0, m.start() - 40) : m.end() + 40] for m in ROLE.finditer(text)]
    assert not roles, f"{len(roles)} literal Sphinx roles on the API page, e.g. {roles[:3]}"
    assert page.count('class="autorefs') >= 20, "the docstrings' cross-references are no links"
