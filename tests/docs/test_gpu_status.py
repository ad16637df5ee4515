"""The GPU status is stated once: docs/performance.md's generated block, written by
``scripts/gen_gpu_status.py`` from the run records of benchmarks/RESULTS.md. The block equals the
generator's output, a record without a field is an error, and no page outside history.md (and
outside the block) restates a status; they link ``performance.md#gpu-status``."""

from __future__ import annotations

import json
import re
import sys

import pytest

from tests.helpers.paths import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import gen_gpu_status as gen  # noqa: E402

# Phrases that state a GPU path's status (the superseded ones of issue 59 among them).
STATUS = re.compile(
    r"has not (yet )?completed|not yet completed|never completed|ran on an? H[12]00|crashed on|"
    r"crashed with a CUDA|test failed there|failed on an H200|nothing here is measured|"
    r"GPU figures are unmeasured|not run on a GPU|not been run on a GPU|has not run on a GPU|"
    r"fixes has run on a GPU",
    re.I,
)


def _records_text() -> str:
    text = gen.RESULTS.read_text()
    begin, end = gen.RECORDS
    return text.split(begin)[1].split(end)[0]


def test_the_block_equals_the_generators_output():
    page = gen.PAGE.read_text()
    block = page.split(gen.BEGIN)[1].split(gen.END)[0]
    runs, paths = gen.records(gen.RESULTS.read_text())
    assert block == gen.render_block(runs, paths)[len(gen.BEGIN) : -len(gen.END)]
    assert gen.main(["--check"]) == 0


def test_the_block_holds_every_run_record_with_its_commit():
    lines = [json.loads(x) for x in _records_text().splitlines() if x.strip()]
    runs = [r for r in lines if "date" in r]
    assert len(runs) >= 3
    block = gen.PAGE.read_text().split(gen.BEGIN)[1].split(gen.END)[0]
    for r in runs:
        assert re.fullmatch(r"[0-9a-f]{7,40}", r["commit"])
        assert f"| {r['run']} | {r['device']} |" in block and f"| {r['commit']} |" in block


def test_a_changed_record_makes_the_check_fail(tmp_path, monkeypatch, capsys):
    results = tmp_path / "RESULTS.md"
    text = gen.RESULTS.read_text()
    changed = text.replace('"result": "', '"result": "changed: ', 1)
    assert changed != text
    results.write_text(changed)
    page = tmp_path / "performance.md"
    page.write_text(gen.PAGE.read_text())
    monkeypatch.setattr(gen, "RESULTS", results)
    monkeypatch.setattr(gen, "PAGE", page)
    assert gen.main(["--check"]) == 1
    assert "is stale" in capsys.readouterr().err


def test_a_record_without_a_field_is_an_error():
    wrap = "<!-- begin gpu runs -->\n{}\n<!-- end gpu runs -->".format
    text = wrap('{"run": "X", "date": "2026-01-01", "device": "d"}')
    with pytest.raises(ValueError, match="lacks versions, commit, command, tables"):
        gen.records(text)
    text = wrap('{"path": "p", "run": "Y", "result": "r"}')
    with pytest.raises(ValueError, match="unknown run 'Y'"):
        gen.records(text)


def _pages():
    docs = sorted((ROOT / "docs").rglob("*.md"))
    return [p for p in [ROOT / "README.md", *docs] if p.name != "history.md"]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_outside_history_restates_a_gpu_status(page):
    text = page.read_text()
    if page == gen.PAGE:
        head, rest = text.split(gen.BEGIN)
        text = head + rest.split(gen.END, 1)[1]
    found = [m.group(0) for m in STATUS.finditer(text)]
    assert not found, f"{page.name} restates a GPU status ({found}); link performance.md#gpu-status"


def test_the_phrases_are_caught():
    for s in ["it has not completed on a GPU", "ran on an H200 (code x)", "crashed on the H200",
              "its test failed there", "nothing here is measured yet"]:  # fmt: skip
        assert STATUS.search(s), s
