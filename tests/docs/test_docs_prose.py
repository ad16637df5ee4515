"""The user pages read as a reference, not a lab notebook: README.md, CHANGELOG.md and every page
under docs/ (the kept logs under docs/results/logs/ aside, which are data) name no load average,
no issue number, no tool's output folder (``$OUT``), no machine "lent" to a session, and no
relative history ("two commits earlier", "then the default, now") that only its writer could
place. A measurement says when (a date), on what (the machine) and with which command instead."""

from __future__ import annotations

import re

import pytest

from tests.helpers.paths import ROOT

PAGES = [
    p
    for p in [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
    if "results/logs" not in p.as_posix()
]
MARKERS = {
    "a load average": r"\bload(?: average)?\s*(?:of\s*)?[~(]?\s*\d|\bunder (?:heavy )?load\b",
    "an issue number": r"\bissues?\s*#?\d+\b|\bthe issue(?:'s)?\b",
    "a tool's output folder": r"\$OUT\b",
    "a machine lent to a session": r"\blent\b",
    "relative history": r"\bcommits? (?:earlier|ago|before this)\b|\bthen the default, now\b",
    "the writer's access": r"\bwe can fetch\b|\bavailable to this (?:work|session)\b",
}


def markers(text: str) -> list[str]:
    """(what, the matched words) for every lab-notebook marker in ``text``."""
    found = []
    for what, pattern in MARKERS.items():
        found += [f"{what}: {m.group(0)!r}" for m in re.finditer(pattern, text, re.I)]
    return found


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_no_page_reads_like_a_lab_notebook(page):
    lines = page.read_text(encoding="utf-8").splitlines()
    found = [f"{page.relative_to(ROOT)}:{i}: {m}" for i, line in enumerate(lines, 1)
             for m in markers(line)]  # fmt: skip
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "text",
    [
        "2-core AMD EPYC under load 4.8",
        "(load average 1.2-1.9 with the run paused)",
        "as issue 7 asked",
        "CIDER: the issue measured 2",
        "copy the files (`cp x $OUT/`)",
        "a GPU is lent for about 15 minutes",
        "534 s, two commits earlier",
        "(then the default, now `weight_grad: true`)",
        "The snapshot we can fetch is JPEG",
    ],
)
def test_the_check_finds_each_marker(text):
    assert markers(text), text


def test_the_check_passes_plain_reference_prose():
    text = ("a 2-core AMD EPYC shared with other jobs; the loader issues one read per "
            "image; `python -m pretrain --cfg digits_moco.yaml`; the load on the GPU")  # fmt: skip
    assert markers(text) == []


def test_the_readme_is_short_and_links_the_rest():
    """What it is, the two commands, the generated headline rows, links and how to cite: at most
    120 lines, the rest lives in docs/."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 120, len(text.splitlines())
    for part in ("## Quick start", "<!-- begin digits table", "docs/results.md", "## How to cite"):
        assert part in text, part
