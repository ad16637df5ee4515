"""Every figure table of docs/performance.md names its benchmarks/RESULTS.md entry: a line
"source: benchmarks/RESULTS.md, <section title>, <date>" in its section, and every such line on
any page names a section that RESULTS.md has (issue 59: one truth for every figure)."""

from __future__ import annotations

import re

import pytest

from tests.helpers.paths import ROOT

PAGE = ROOT / "docs" / "performance.md"
MENTION = re.compile(r"source: benchmarks/RESULTS\.md, ", re.I)
# Sections whose tables have no RESULTS.md entry yet: the H100's (measured outside the
# developers' machines, before the suite appended its tables) and Memory's on-paper sizes.
NOT_YET: set[str] = set()


def entries() -> list[tuple[str, str]]:
    """(title, stamp) of each section heading of RESULTS.md ('## TITLE, STAMP')."""
    out = []
    for head in re.findall(r"^## (.+)$", (ROOT / "benchmarks" / "RESULTS.md").read_text(), re.M):
        suite = re.match(r"GPU suite (\S+) on ", head)
        if suite:
            out.append((f"GPU suite {suite[1]}", suite[1]))
        elif ", 20" in head:
            title, stamp = head.rsplit(", 20", 1)
            out.append((title, "20" + stamp))
    return out


def names_an_entry(text: str) -> bool:
    """``text`` (after 'source: benchmarks/RESULTS.md, ') starts 'TITLE, STAMP' where TITLE
    begins a heading's title (a long one may be cut) and STAMP begins its stamp."""
    m = re.match(r"(.+?), (20\d\d-\d\d-\d\d(?:[T ][\d:]+)?)", text)
    return bool(m) and any(t.startswith(m[1]) and s.startswith(m[2]) for t, s in entries())


def _sections() -> dict[str, str]:
    parts = re.split(r"\n(?=## )", PAGE.read_text())
    return {p.splitlines()[0][3:]: p for p in parts if p.startswith("## ")}


def _has_figure_table(section: str) -> bool:
    return any(re.match(r"\|.*\d", ln) and not ln.startswith("|---") for ln in section.splitlines())


@pytest.mark.parametrize("title", [t for t, s in _sections().items() if _has_figure_table(s)])
def test_each_figure_table_section_names_its_results_entry(title):
    if title in NOT_YET:
        pytest.skip(f"{title}: no RESULTS.md entry yet (kept as NOT_YET)")
    section = " ".join(_sections()[title].split())
    if "on paper" in section.lower():  # computed from sizes, not measured (as test_docs_figures)
        return
    assert MENTION.search(section), (
        f"performance.md, {title}: no 'source: benchmarks/RESULTS.md, ...'"
    )


def test_every_source_line_names_a_results_section():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    seen = 0
    for page in pages:
        text = " ".join(page.read_text().split())
        for m in MENTION.finditer(text):
            seen += 1
            rest = text[m.end() :]
            assert names_an_entry(rest), (page.name, rest[:120])
    assert seen >= 6


def test_a_wrong_title_is_caught():
    assert names_an_entry("Training step, 2026-11-28; more")
    assert not names_an_entry("Training step, 2026-11-29; more")
    assert not names_an_entry("Training steps of another kind, 2026-11-28")
