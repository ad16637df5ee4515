"""Each metric is defined once, in docs/performance.md's "Metric definitions" (one anchor each),
and the benchmark scripts' table headers use those names, not the older ones that let figures of
different definitions sit side by side as if one (issue 59)."""

from __future__ import annotations

import re

import pytest

from tests.helpers.paths import ROOT

PAGE = ROOT / "docs" / "performance.md"
ANCHORS = ("model-step", "trainer-step", "bare-model", "images-per-s", "epoch-time", "estimate-200")
# script: the defined names its tables print
NAMES = {
    "step.py": ["model step ms"],
    "input.py": ["trainer step ms", "model step ms"],
    "profile_step.py": ["the model step, unprofiled", "bare model ms"],
    "train.py": ["images/s (steady, warm-up excluded)", "kNN monitor excluded"],
}
OLD = ("| median step ms |", "trainer ms/step", "| the step, unprofiled")


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_each_metric_is_defined_once_with_an_anchor():
    text = PAGE.read_text()
    defs = _section(text, "Metric definitions")
    for anchor in ANCHORS:
        assert defs.count(f'<a id="{anchor}"></a>') == 1, anchor
        pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
        assert sum(p.read_text().count(f'id="{anchor}"') for p in pages) == 1, anchor


@pytest.mark.parametrize("script", sorted(NAMES))
def test_benchmark_tables_use_the_defined_names(script):
    src = (ROOT / "benchmarks" / script).read_text()
    for name in NAMES[script]:
        assert name in src, (script, name)
    assert not [o for o in OLD if o in src], script


def test_the_gpu_tables_name_a_definition_for_every_step_row():
    """A row of the H200 table that gives a step time links the definition it uses."""
    rows = [r for r in _section(PAGE.read_text(), "GPU: one NVIDIA H200").splitlines()
            if r.startswith("| ") and re.search(r"step", r.split("|")[1])]  # fmt: skip
    assert rows
    for row in rows:
        assert re.search(r"\(#(model-step|trainer-step|bare-model)\)", row.split("|")[1]), row
