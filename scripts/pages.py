"""What the page generators (``scripts/gen_*.py``) share: the ``<!-- generated: NAME (COMMAND) -->``
/ ``<!-- end: NAME -->`` blocks they rewrite inside a page's own prose, and the tail of their
``--check`` (exit 1 with a short diff and the command to run when a page is stale, else write it).
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path


def replace_block(text: str, name: str, command: str, rows: list[str], page: Path) -> str:
    """``text`` with the block ``name`` (written by ``command``) holding ``rows``; ValueError
    naming ``page`` when the page has no such block."""
    begin, end = f"<!-- generated: {name} ({command}) -->", f"<!-- end: {name} -->"
    pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise ValueError(f"{page}: no {begin} ... {end} block")
    block = f"{begin}\n" + "\n".join(rows) + f"\n{end}"
    return pattern.sub(lambda _: block, text)


def splice(page_text: str, begin: str, end: str, block: str, page: Path) -> str:
    """``page_text`` with its one ``begin`` ... ``end`` block (markers included) replaced by
    ``block``; ValueError naming ``page`` unless there is exactly one such block."""
    if page_text.count(begin) != 1 or page_text.count(end) != 1:
        raise ValueError(f"{page.name}: want one {begin!r} ... {end!r} block")
    head, rest = page_text.split(begin)
    return head + block + rest.split(end, 1)[1]


def write_or_check(page: Path, new: str, command: str, check: bool) -> int:
    """With ``check``: 0 when ``page`` holds ``new``, else 1 after printing (to stderr) the first
    lines of the diff and ``PAGE is stale: run COMMAND``. Without: write ``page``, 0."""
    if not check:
        page.write_text(new)
        print(f"wrote {page}")
        return 0
    old = page.read_text() if page.is_file() else ""
    if old == new:
        return 0
    diff = difflib.unified_diff(
        old.splitlines(), new.splitlines(), str(page), "generated", lineterm="", n=0
    )
    print("\n".join(list(diff)[:40]), file=sys.stderr)
    print(f"{page} is stale: run {command}", file=sys.stderr)
    return 1
