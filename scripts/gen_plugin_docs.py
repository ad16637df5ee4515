"""Write the contract tables and the step record of docs/plugins.md from the code.

    python scripts/gen_plugin_docs.py            # rewrite the tables in docs/plugins.md
    python scripts/gen_plugin_docs.py --check    # exit 1 if the page is stale (CI, tests)

Every class attribute and hook a strategy or a loss can declare or override, with its default
and its meaning: the ``#:`` comment above an attribute, a hook's docstring
(``pretrain.testing.contract_docs``, which the kit installs). The tables sit between
``<!-- generated: contract ... -->`` and ``<!-- end: contract -->``; the fields of the step record
``Step``, ``moco_logits``' signature and the kit's step counts (``pretrain.testing.step_docs``)
between ``<!-- generated: step ... -->`` and ``<!-- end: step -->``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))  # pages.py, when loaded by path (the tests)
import pages  # noqa: E402  (the generators' shared blocks and --check)

PAGE = ROOT / "docs" / "plugins.md"
COMMAND = "python scripts/gen_plugin_docs.py"


def render(text: str) -> str:
    """``text`` with the contract block rewritten."""
    sys.path.insert(0, str(ROOT))
    from pretrain.testing import step_docs
    from pretrain.testing.contract_docs import page_block

    text = pages.replace_block(text, "step", COMMAND, step_docs.rows(), PAGE)
    return pages.replace_block(text, "contract", COMMAND, page_block(), PAGE)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = p.parse_args(argv)
    return pages.write_or_check(PAGE, render(PAGE.read_text()), COMMAND, args.check)


if __name__ == "__main__":
    sys.exit(main())
