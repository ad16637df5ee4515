"""docs/troubleshooting.md's quoted messages, and the check that a message is one of them: a
quote's capitalised placeholders (DIR, PATH, N, ...) stand for any text. Shared by the tests
that check a message word for word against the page."""

from __future__ import annotations

import re

from tests.helpers.paths import ROOT

DOC = ROOT / "docs" / "troubleshooting.md"
PLACEHOLDER = r"\b(?:DIR|PATH|LIST|NAMES|N|C|L|M|WHY|LINK|TARGET|RUN|FILE|DTYPE|KEY|TYPE|NAME)\b"


def quotes(heading: str | None = None) -> list[str]:
    """The backquoted messages of the page's tables (of the section under ``### heading`` only,
    when given)."""
    lines = DOC.read_text().splitlines()
    if heading is not None:
        start = lines.index(f"### {heading}")
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("#")), None)
        lines = lines[start:end]
    rows = [line for line in lines if line.startswith("| `")]
    return [q for row in rows for q in re.findall(r"`([^`]+)`", row)]


def as_regex(quote: str) -> re.Pattern[str]:
    tail = quote.endswith(", ...")
    body = quote[: -len(", ...")] if tail else quote
    parts = re.split(PLACEHOLDER, body)
    regex = ".+".join(re.escape(p) for p in parts) + ("(?:, .+)?" if tail else "")
    return re.compile(regex)


def assert_documented(message: str, heading: str | None = None) -> None:
    """``message`` is quoted on the page (under ``### heading``, when given)."""
    found = [q for q in quotes(heading) if as_regex(q).fullmatch(message)]
    where = DOC.name + (f" under {heading!r}" if heading else "")
    assert found, f"not quoted on {where}: {message!r}"


def warning_of(capsys) -> str:
    lines = [s for s in capsys.readouterr().err.splitlines() if s.startswith("warning: ")]
    assert len(lines) == 1, lines
    return lines[0].removeprefix("warning: ")
