"""docs/comparison.md's claims about lightly hold for the lightly that is installed (the version
benchmarks/peers.py compares against): whether ``lightly.loss`` has a supervised-contrastive loss,
and which version the row names; a cell that says "anywhere else in the package" holds for every
source file of the installed package."""

from __future__ import annotations

import re
from pathlib import Path

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
    if "anywhere else in the package" in cell:
        files = Path(lightly.__file__).parent.rglob("*.py")
        said = [str(f) for f in files if re.search(r"supcon|supervised contrastive", f.read_text(
            errors="replace"), re.I)]  # fmt: skip
        assert not said, f"lightly {lightly.__version__} mentions SupCon in {said}"
