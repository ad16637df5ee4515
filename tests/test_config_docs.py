"""The configuration reference (docs/configuration.md) is generated from pretrain/config.py by
scripts/gen_config_docs.py: it must hold every key of the config dataclasses with its default and
the comment beside it in the source, and be what the generator writes today (else: run
``python scripts/gen_config_docs.py``)."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

import pytest

from pretrain import config

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "configuration.md"


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_config_docs", ROOT / "scripts" / "gen_config_docs.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _keys(obj, prefix=""):
    """Every dotted key of the dataclass tree, enumerated with dataclasses alone."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _keys(value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", value


def _rows(text):
    """{key: [cells]} of the page's table rows."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| `([\w.]+)` \|", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
    return rows


def _source_comments():
    """{field name of a class: first comment} read with a regex over the source lines."""
    out, cls = {}, None
    for line in (ROOT / "pretrain" / "config.py").read_text().splitlines():
        m = re.match(r"class (\w+)", line)
        if m:
            cls = m.group(1)
        m = re.match(r"    (\w+): [^=]+=.*?  # (.+)$", line)
        if m and cls:
            out[(cls, m.group(1))] = m.group(2).strip()
    return out


def test_the_page_is_what_the_generator_writes():
    gen = _generator()
    assert PAGE.read_text() == gen.render(), "stale: run python scripts/gen_config_docs.py"
    assert gen.main(["--check"]) == 0


def test_every_key_has_a_row_with_its_default():
    rows = _rows(PAGE.read_text())
    keys = dict(_keys(config.Config()))
    assert len(keys) >= 80
    missing = sorted(set(keys) - set(rows))
    assert not missing, f"keys missing from {PAGE.name}: {missing}"
    assert not set(rows) - set(keys), "rows for keys that no longer exist"
    for key, value in keys.items():
        default = rows[key][2].strip("`")
        if isinstance(value, bool):
            assert default == str(value).lower(), key
        elif isinstance(value, (int, float)):
            assert float(default) == value, key
        elif isinstance(value, str):
            assert default == (value or '""'), key
        else:
            assert [float(x) for x in re.findall(r"[\d.]+", default)] == [
                float(v) for v in value
            ] or (default in ("{}", "[]") and not value), key


def test_source_comments_and_choices_reach_the_page():
    rows = _rows(PAGE.read_text())
    cls_of = {"": "Config"}
    for f in dataclasses.fields(config.Config()):
        sub = getattr(config.Config(), f.name)
        if dataclasses.is_dataclass(sub):
            cls_of[f"{f.name}."] = type(sub).__name__
    checked = 0
    for key in rows:
        prefix = key.rpartition(".")[0] + "." if "." in key else ""
        comment = _source_comments().get((cls_of[prefix], key.rpartition(".")[2]))
        if comment is None:
            continue
        first = comment.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
        first = first.replace("*", "\\*")
        assert first in rows[key][4], (key, first, rows[key][4])
        checked += 1
    assert checked > 60
    for key, values in {**config.CHOICES, **config.registered_choices()}.items():
        for v in values:
            assert f"`{v}`" in rows[key][3], (key, v)


@pytest.mark.parametrize("damage", ["drop_row", "edit_default"])
def test_check_mode_fails_on_a_stale_page(tmp_path, capsys, damage):
    gen = _generator()
    text = gen.render()
    if damage == "drop_row":
        text = "\n".join(line for line in text.splitlines() if "`train.base_lr`" not in line)
    else:
        text = text.replace("| `200` |", "| `100` |", 1)
    page = tmp_path / "configuration.md"
    page.write_text(text)
    assert gen.main(["--check", "--out", str(page)]) == 1
    assert "run python scripts/gen_config_docs.py" in capsys.readouterr().err
