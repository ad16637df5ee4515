"""Every table of measured numbers in the reference pages names its command, date and machine.

A figure in README.md or docs/ must say which command produced it, when and on what
machine; superseded tables belong in docs/history.md (the measurement log), not on the reference
pages. This test reads the pages' Markdown and checks, for every table with a numeric cell, that the
text of its section up to and including the table holds

- a command: a backticked or fenced ``python ...``, ``bash ...`` or ``torchrun ...`` (environment
  assignments such as ``PYTHONPATH=$PWD`` may come first),
- a date, YYYY-MM-DD,
- a machine word: CPU, Xeon, EPYC, H100, H200, V100, GPU or core(s).

A table computed on paper (its section says "on paper") is exempt, and so is a table of settings
or definitions marked by the comment line ``<!-- not measured: ... -->`` right above it. The
pages: README.md and every page of docs/ but the generated configuration reference, the methods
page (equations) and docs/recipes/ (checked by their own tests); the measurement log
(docs/history.md) is checked as well.
"""

from __future__ import annotations

import re

import pytest

from tests.helpers.paths import ROOT

PAGES = (
    "README.md",
    *sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "docs").glob("*.md")
        if p.name not in ("configuration.md", "methods.md")
    ),
)
REFERENCE_PAGES = ("README.md", "docs/performance.md", "docs/reproducing.md", "docs/ocsvm_gpu.md")

_NUMBER = re.compile(r"^[-+\u2212~]?\d[\d,]*(\.\d+)?\s*(x|ms|s|%|MiB|MB|GB|min)?$")
_COMMAND = re.compile(r"`(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|bash|torchrun)\b[^`]*`")
_FENCED_COMMAND = re.compile(r"^\s*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|bash|torchrun)\s")
_DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d(?!\d)")  # also 2026-11-25T17:57
_MACHINE = re.compile(r"\b(CPU|Xeon|EPYC|H100|H200|V100|GPU|cores?)\b")


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _is_numeric(cell: str) -> bool:
    return bool(_NUMBER.match(cell.replace("*", "").replace("`", "").strip()))


def tables_without_provenance(markdown: str) -> list[str]:
    """The first row of every numeric table whose section text, up to the table, lacks a
    command, a date or a machine (with what is missing)."""
    lines = markdown.splitlines()
    problems: list[str] = []
    section: list[str] = []  # prose lines of the current section so far
    commands_in_fences = False
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            i += 1
            continue
        if in_fence:
            if _FENCED_COMMAND.match(line):
                commands_in_fences = True
            section.append(line)
            i += 1
            continue
        if line.startswith("#"):
            section, commands_in_fences = [], False
            i += 1
            continue
        is_table = (
            line.lstrip().startswith("|")
            and i + 1 < len(lines)
            and re.match(r"^\s*\|[\s:|-]*-[\s:|-]*$", lines[i + 1])
        )
        if not is_table:
            if line.startswith("    ") and _FENCED_COMMAND.match(line[4:]):
                commands_in_fences = True  # an indented code block
            section.append(line)
            i += 1
            continue
        marked = i > 0 and lines[i - 1].strip().startswith("<!-- not measured")
        j = i
        while j < len(lines) and lines[j].lstrip().startswith("|"):
            j += 1
        table = lines[i:j]
        body = [c for row in table[2:] for c in _cells(row)]
        text = "\n".join(section + table)
        exempt = marked or "on paper" in text.lower()
        if any(_is_numeric(c) for c in body) and not exempt:
            missing = [
                name
                for name, ok in (
                    ("command", commands_in_fences or _COMMAND.search(text)),
                    ("date", _DATE.search(text)),
                    ("machine", _MACHINE.search(text)),
                )
                if not ok
            ]
            if missing:
                problems.append(f"{table[0].strip()[:80]} (missing: {', '.join(missing)})")
        section.extend(table)
        i = j
    return problems


@pytest.mark.parametrize("page", PAGES)
def test_every_numeric_table_names_command_date_and_machine(page: str) -> None:
    problems = tables_without_provenance((ROOT / page).read_text(encoding="utf-8"))
    assert not problems, f"{page}: tables without provenance:\n" + "\n".join(problems)


def test_checker_flags_a_table_without_provenance() -> None:
    bare = "## Speed\n\nFast:\n\n| a | ms |\n|---|---|\n| x | 12.5 |\n"
    assert tables_without_provenance(bare) == ["| a | ms | (missing: command, date, machine)"]
    # Provenance in another section does not count.
    other = "## A\n\n`python b.py`, 2026-11-25, 2-core Xeon\n\n" + bare
    assert len(tables_without_provenance(other)) == 1
    # Each piece is needed.
    for text, missing in (
        ("`python b.py` on the Xeon", "date"),
        ("2026-11-25 on the Xeon", "command"),
        ("`python b.py`, 2026-11-25", "machine"),
    ):
        page = f"## Speed\n\n{text}:\n\n| a | ms |\n|---|---|\n| x | 12.5 |\n"
        assert tables_without_provenance(page) == [f"| a | ms | (missing: {missing})"]
    good = "## Speed\n\n`OMP_NUM_THREADS=1 python b.py`, 2026-11-25, 2-core AMD EPYC:\n\n"
    assert tables_without_provenance(good + "| a | ms |\n|---|---|\n| x | 12.5 |\n") == []
    # A fenced command counts; a table of words needs nothing; "on paper" is exempt.
    fenced = "## S\n\n```bash\npython b.py\n```\n\n2026-11-25, H200:\n\n| a |\n|---|\n| 3.5x |\n"
    assert tables_without_provenance(fenced) == []
    assert tables_without_provenance("## S\n\n| a |\n|---|\n| fast |\n") == []
    assert tables_without_provenance("## S\n\nOn paper:\n\n| a |\n|---|\n| 8.4 MB |\n") == []
    marked = "## S\n\n<!-- not measured: budgets -->\n| a |\n|---|\n| 60 s |\n"
    assert tables_without_provenance(marked) == []
    assert tables_without_provenance(marked.replace("<!-- not measured: budgets -->\n", "")) == [
        "| a | (missing: command, date, machine)"
    ]


def test_reference_pages_do_not_quote_superseded_headline() -> None:
    """The first OC-SVM record (8.9x) lives in the measurement log only."""
    for page in REFERENCE_PAGES:
        assert "8.9x" not in (ROOT / page).read_text(encoding="utf-8"), page
    assert "8.9x" in (ROOT / "docs" / "history.md").read_text(encoding="utf-8")
