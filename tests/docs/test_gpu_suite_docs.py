"""The GPU suite's budget is stated once, in docs/gpu_suite.md's generated block, as
benchmarks/gpu_suite.sh has it: ``scripts/gen_gpu_suite_docs.py`` reads the script's ``TOTAL=``
and ``BUDGET`` table, the block matches them, and a changed budget makes ``--check`` fail; the
other pages link the block rather than repeat a total."""

from __future__ import annotations

import re
import sys

import pytest

from tests.helpers.paths import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import gen_gpu_suite_docs as gen  # noqa: E402


def test_the_block_states_the_scripts_total_and_budgets():
    script = gen.SCRIPT.read_text()
    total = int(re.search(r"^TOTAL=(\d+)$", script, re.M).group(1))
    page = gen.PAGE.read_text()
    block = page.split(gen.BEGIN)[1].split(gen.END)[0]
    assert f"`--total`, {total} s" in block
    assert f"`peers` {gen.budgets(script)[1]['peers']} s" in block
    assert gen.main(["--check"]) == 0


def test_a_changed_budget_makes_the_check_fail(tmp_path, monkeypatch, capsys):
    script = tmp_path / "gpu_suite.sh"
    text = gen.SCRIPT.read_text()
    assert re.search(r"^TOTAL=\d+$", text, flags=re.M)
    script.write_text(re.sub(r"^TOTAL=\d+$", "TOTAL=480", text, flags=re.M))
    page = tmp_path / "gpu_suite.md"
    page.write_text(gen.PAGE.read_text())
    monkeypatch.setattr(gen, "SCRIPT", script)
    monkeypatch.setattr(gen, "PAGE", page)
    assert gen.main(["--check"]) == 1
    assert "is stale" in capsys.readouterr().err
    assert gen.main([]) == 0 and "`--total`, 480 s (8 min)" in page.read_text()


def test_a_script_without_a_budget_table_is_an_error():
    with pytest.raises(ValueError, match="no TOTAL=N or declare -A BUDGET"):
        gen.budgets("TOTAL=10\n")


def test_no_other_page_states_the_suites_total():
    """A sentence that names the suite states no minutes (a part's own figures are in seconds)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    said = []
    for page in pages:
        if page == gen.PAGE:
            continue
        for sentence in re.split(r"(?<=\.)\s", " ".join(page.read_text().split())):
            if re.search(r"gpu_suite|GPU suite", sentence) and re.search(r"\b\d+ ?min", sentence):
                said.append(f"{page.name}: {sentence[:120]}")
    assert not said, "\n".join(said)
