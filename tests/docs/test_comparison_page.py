"""docs/comparison.md's claims about lightly hold for the lightly that is installed (the version
benchmarks/peers.py compares against): whether ``lightly.loss`` has a supervised-contrastive loss,
and which version the row names."""

from __future__ import annotations

import re

import pytest

from tests.helpers.paths import ROOT


def test_the_lightly_supervised_losses_cell():
    lightly = pytest.importorskip("lightly")
    losses = pytest.importorskip("lightly.loss")
    page = (ROOT / "docs" / "comparison.md").read_text()
    row = next(x for x in page.splitlines() if x.startswith("| supervised / labelled contrastive"))
    cell = row.split(" | ")[2]
    sup = [n for n in dir(losses) if "sup" in n.lower()]
    if sup:
        assert not cell.startswith("-"), f"lightly {lightly.__version__} has {sup}: {cell}"
    else:
        assert cell.startswith("-"), f"lightly {lightly.__version__} has no SupCon loss: {cell}"
        named = re.search(r"lightly (\d+\.\d+\.\d+)", cell)
        assert named and named.group(1) == lightly.__version__, cell
