"""docs/troubleshooting.md's quoted messages, and the check that a message is one of them: a
quote's capitalised placeholders (DIR, PATH, N, ...) stand for any text. Shared by the tests
that check a message word for word against the page."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "troubleshooting.md"
PLACEHOLDER = r"\b(?:DIR|PATH|LIST|NAMES|N|C|L|M|WHY|LINK|TARGET|RUN|FILE)\b"


def quotes() -> list[str]:
    """The backquoted messages of the page's tables."""
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| `")]
    return [q for row in rows for q in re.findall(r"`([^`]+)`", row)]


def as_regex(quote: str) -> re.Pattern[str]:
    tail = quote.endswith(", ...")
    body = quote[: -len(", ...")] if tail else quote
    parts = re.split(PLACEHOLDER, body)
    regex = ".+".join(re.escape(p) for p in parts) + ("(?:, .+)?" if tail else "")
    return re.compile(regex)


def assert_documented(message: str) -> None:
    found = [q for q in quotes() if as_regex(q).fullmatch(message)]
    assert found, f"not quoted on {DOC.name}: {message!r}"
