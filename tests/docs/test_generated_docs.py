"""Every generator of the docs (scripts/gen_*.py) writes its pages with no arguments and checks
them with ``--check``: the checked-in pages are what the code generates."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT

GENERATORS = sorted((ROOT / "scripts").glob("gen_*.py"))


def test_there_are_generators():
    assert {"gen_config_docs.py", "gen_step_counts.py"} <= {p.name for p in GENERATORS}


@pytest.mark.parametrize("script", GENERATORS, ids=[p.name for p in GENERATORS])
def test_the_pages_are_what_the_generator_writes(script):
    done = subprocess.run([sys.executable, str(script), "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def pages_module():
    spec = importlib.util.spec_from_file_location("pages", ROOT / "scripts" / "pages.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("script", ["gen_config_docs.py", "gen_plugin_docs.py",
                                    "gen_step_counts.py"])  # fmt: skip
def test_the_block_generators_share_one_check_tail(script):
    """One --check tail (scripts/pages.py), not a copy per generator."""
    text = (ROOT / "scripts" / script).read_text()
    assert "pages.write_or_check(" in text and "difflib" not in text


def test_the_shared_check_tail_and_block_writer(tmp_path, capsys):
    pages = pages_module()
    page = tmp_path / "p.md"
    page.write_text("intro\n<!-- generated: t (cmd) -->\nold\n<!-- end: t -->\nafter\n")
    new = pages.replace_block(page.read_text(), "t", "cmd", ["a", "b"], page)
    assert new == "intro\n<!-- generated: t (cmd) -->\na\nb\n<!-- end: t -->\nafter\n"
    assert pages.write_or_check(page, new, "cmd", True) == 1
    err = capsys.readouterr().err
    assert err.endswith(f"{page} is stale: run cmd\n") and "-old" in err and "+a" in err, err
    assert pages.write_or_check(page, new, "cmd", False) == 0 and page.read_text() == new
    assert pages.write_or_check(page, new, "cmd", True) == 0
    with pytest.raises(ValueError, match=r"p\.md: no <!-- generated: u \(cmd\) --> \.\.\. "):
        pages.replace_block(new, "u", "cmd", [], page)
