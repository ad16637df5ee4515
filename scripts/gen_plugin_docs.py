"""Write the contract tables of docs/plugins.md from the base classes' code.

    python scripts/gen_plugin_docs.py            # rewrite the tables in docs/plugins.md
    python scripts/gen_plugin_docs.py --check    # exit 1 if the page is stale (CI, tests)

Every class attribute and hook a strategy or a loss can declare or override, with its default
and its meaning: the ``#:`` comment above an attribute, a hook's docstring
(``negatives.testing.contract_docs``, which the kit installs). The tables sit between
``<!-- generated: contract ... -->`` and ``<!-- end: contract -->``.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "plugins.md"
COMMAND = "python scripts/gen_plugin_docs.py"
BEGIN, END = f"<!-- generated: contract ({COMMAND}) -->", "<!-- end: contract -->"


def render(text: str) -> str:
    """``text`` with the contract block rewritten."""
    sys.path.insert(0, str(ROOT))
    from negatives.testing.contract_docs import page_block

    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise ValueError(f"{PAGE}: no {BEGIN} ... {END} block")
    block = f"{BEGIN}\n" + "\n".join(page_block()) + f"\n{END}"
    return pattern.sub(lambda _: block, text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = p.parse_args(argv)
    old = PAGE.read_text()
    new = render(old)
    if args.check:
        if new != old:
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=1)
            print(f"{PAGE} is stale; run {COMMAND}\n" + "\n".join(list(diff)[:40]))
            return 1
        return 0
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
