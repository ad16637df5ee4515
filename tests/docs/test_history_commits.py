"""The measurement log keeps superseded figures with their commits: every ``###`` section of
docs/history.md (its ``####`` subsections included) names at least one commit, the code it
measured or the commit that first recorded its figures, and every commit it names exists in the
repository's history.

A commit is a 7 to 40 digit hexadecimal token: inside backticks any such token, in plain text one
that mixes digits and letters (so that a plain number such as 1000000 is not taken for one). The
existence check runs ``git cat-file -e HASH^{commit}``; it is skipped where there is no git history
to ask (a source tarball without ``.git``, a shallow clone, no ``git`` program)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.helpers.paths import ROOT

HISTORY = ROOT / "docs" / "history.md"

_TICKED = re.compile(r"`([0-9a-f]{7,40})`")
_PLAIN = re.compile(r"(?<![\w`])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w`])")
_SECTION = re.compile(r"^###\s+(.*)$")
_END = re.compile(r"^##\s")  # a date heading ends the section before it


def sections(markdown: str) -> list[tuple[str, str]]:
    """(heading, text) of each ``###`` section, its text (heading line included) running to the
    next ``##`` or ``###`` heading; ``####`` subsections belong to the section above them."""
    found: list[tuple[str, list[str]]] = []
    inside = False
    for line in markdown.splitlines():
        start = _SECTION.match(line)
        if start:
            found.append((start.group(1).strip(), []))
        inside = bool(start) or (inside and not _END.match(line))
        if inside:
            found[-1][1].append(line)
    return [(head, "\n".join(lines)) for head, lines in found]


def commits_named(text: str) -> set[str]:
    """The commit hashes ``text`` names (see the module's docstring for what counts)."""
    return set(_TICKED.findall(text)) | set(_PLAIN.findall(text))


def sections_without_commit(markdown: str) -> list[str]:
    """The headings of the ``###`` sections that name no commit."""
    return [head for head, text in sections(markdown) if not commits_named(text)]


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


def test_every_section_names_a_commit():
    text = HISTORY.read_text(encoding="utf-8")
    assert sections(text), "docs/history.md has no ### section"
    missing = sections_without_commit(text)
    assert not missing, "sections naming no commit (the code measured or 'recorded at'):\n" + (
        "\n".join(missing)
    )


def test_every_named_commit_exists():
    if not (ROOT / ".git").exists():
        pytest.skip("no .git here (a source tarball): no history to look the commits up in")
    if shutil.which("git") is None:
        pytest.skip("no git program to look the commits up with")
    if _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.skip("a shallow clone lacks the older commits the log names")
    named = {h for _, text in sections(HISTORY.read_text(encoding="utf-8"))
             for h in commits_named(text)}  # fmt: skip
    unknown = sorted(h for h in named if _git("cat-file", "-e", f"{h}^{{commit}}").returncode)
    assert not unknown, f"docs/history.md names commits this repository lacks: {unknown}"


GOOD = """# Log

Intro naming `abcdef0`, which no section owns.

## A day

### Traced in backticks

Code at `0862ff6`, the last commit before the run.

| a | b |
|---|---|
| 1 | 2 |

### Traced in plain text, in a subsection

Moved here.

#### Its table, code 9ab8f63

| a | b |
|---|---|
| 1 | 2 |

## An earlier day

### Traced by its heading at e441cbd

Figures.
"""

BAD = """# Log

## A day

### Traced

Code at `0862ff6`.

### Not traced

The step took 1234567 ms (1.5x), on a machine with 2 cores; the cafe and the facade.

## An earlier day

### Also not traced

Its commit is only in the next section's text.

### Traced later

Recorded at c132306.
"""


def test_the_check_accepts_sections_that_name_commits():
    assert [head for head, _ in sections(GOOD)] == [
        "Traced in backticks",
        "Traced in plain text, in a subsection",
        "Traced by its heading at e441cbd",
    ]
    assert sections_without_commit(GOOD) == []
    assert commits_named(GOOD) == {"abcdef0", "0862ff6", "9ab8f63", "e441cbd"}


def test_the_check_finds_each_section_without_a_commit():
    assert sections_without_commit(BAD) == ["Not traced", "Also not traced"]
    assert commits_named(dict(sections(BAD))["Not traced"]) == set()
    assert "Recorded at c132306." in dict(sections(BAD))["Traced later"]


def test_a_plain_number_or_word_is_no_commit_but_a_ticked_one_is():
    assert commits_named("1234567 ms, the decade, 0x1234567, v1.2.3, deadbeef1x") == set()
    assert commits_named("code at `1234567` and `deadbee`") == {"1234567", "deadbee"}
    assert commits_named("(code a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0)") == {
        "a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0"
    }
    assert commits_named("a 41-digit token " + "a1" * 20 + "c") == set()
