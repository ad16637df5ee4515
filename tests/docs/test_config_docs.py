"""The configuration reference (docs/configuration.md) is generated from the schema
(pretrain/config/schema.py) by scripts/gen_config_docs.py: it must hold every key of the config
dataclasses with its default and its description in the source, and be what the generator writes
today (else: run ``python scripts/gen_config_docs.py``)."""

from __future__ import annotations

import dataclasses
import html
import importlib.util
import inspect
import re

import pytest

import negatives
from negatives.base import strategies
from pretrain import config, losses
from tests.helpers.paths import ROOT

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
    """{key: [cells]} of the rows of the config keys' tables (the page's part before the rules
    across keys and the strategies' and losses' settings)."""
    rows = {}
    for line in text.split("\n## Rules across keys")[0].splitlines():
        m = re.match(r"\| `([\w.]+)` \|", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
    return rows


def _source_comments():
    """{(class, field): first line of its description} read with a regex over the source lines
    of the schema's ``Keys:`` tables."""
    out, cls = {}, None
    for line in (ROOT / "pretrain" / "config" / "schema.py").read_text().splitlines():
        m = re.match(r"class (\w+)", line)
        if m:
            cls = m.group(1)
        m = re.match(r"        (\w+): (.+)$", line)
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
    assert len(keys) >= 75  # 7 per-loss keys moved into loss.kwargs
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
    registries = {"loss.name": losses.registry, "negatives.name": negatives.strategies}
    in_tree = {  # an installed plugin (an entry point) is left out of the page
        key: [v for v in values if not registries[key].origin(v)]
        for key, values in config.registered_choices().items()
    }
    for key, values in {**config.CHOICES, **in_tree}.items():
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


def _section(text, heading):
    """The lines of the ``### heading`` section, up to the next heading."""
    part = text.split(f"\n### {heading}\n", 1)
    assert len(part) == 2, f"no section '### {heading}' in {PAGE.name}"
    return part[1].split("\n#")[0]


def _arg_rows(section):
    """{argument: [cells]} of a settings table."""
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `(\w+)` \|", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
    return rows


@pytest.mark.parametrize(
    ("kind", "registry"),
    [("strategy", strategies), ("loss", losses.registry)],
    ids=["strategy", "loss"],
)
def test_every_strategy_and_loss_has_its_settings(kind, registry):
    """Each registered name has a section with a row per constructor argument (read here with
    inspect.signature, not the generator's helpers), its default and a description."""
    text = PAGE.read_text()
    assert len(registry) >= 6
    for name in registry.names():
        if registry.origin(name):  # an installed plugin: not on this page
            continue
        rows = _arg_rows(_section(text, f"{kind} `{name}`"))
        init = registry._init(name)
        params = {} if init is None else dict(inspect.signature(init).parameters)
        params.pop("self", None)
        assert set(rows) == set(params), (name, sorted(rows), sorted(params))
        for arg, p in params.items():
            cells = rows[arg]
            assert cells[4] not in ("", "-"), f"{name}.{arg} has no description"
            if cells[2].startswith("from "):
                assert kind == "loss" and arg in registry.get(name).from_run, (name, arg)
            elif p.default is inspect.Parameter.empty:
                assert cells[2] == "(required)", (name, arg)
            elif p.default is None:
                assert cells[2] == "`null`", (name, arg)
            elif isinstance(p.default, bool):
                assert cells[2] == f"`{str(p.default).lower()}`", (name, arg)
            elif isinstance(p.default, str):
                assert cells[2] == f"`{p.default}`", (name, arg)
            elif isinstance(p.default, (int, float)):
                assert float(cells[2].strip("`")) == p.default, (name, arg)
            else:
                shown = re.findall(r"[\w.]+", cells[2])
                want = [float(v) if isinstance(v, (int, float)) else v for v in p.default]
                assert [float(x) if x[0].isdigit() else x for x in shown] == want, (name, arg)


def test_choices_checked_by_a_constructor_are_listed():
    text = PAGE.read_text()
    mioc = _arg_rows(_section(text, "strategy `mioc`"))
    assert "`paper` \\| `code`" in mioc["warmup"][3]
    assert "must lie in [0, 1]" in mioc["beta_max"][3]
    ring = _arg_rows(_section(text, "loss `ring`"))
    assert all(f"`{a}`" in ring["anneal"][3] for a in ("none", "linear", "step", "exponential"))
    hard = _arg_rows(_section(text, "loss `hard`"))
    assert "`null` \\| `down`" in hard["anneal"][3]
    assert hard["epochs"][2] == "from `train.epochs`"


def test_an_undocumented_constructor_argument_fails_the_generator(monkeypatch):
    """A kwarg added without an Args: entry in the docstring stops the page (and so CI's --check)
    with the class and the argument named."""

    class Undocumented(strategies.get("none")):
        """A strategy whose docstring forgets an argument.

        Args:
            alpha: documented.
        """

        def __init__(self, *, alpha: float = 1.0, beta: int = 2) -> None:
            super().__init__()

    monkeypatch.setitem(strategies._classes, "undocumented", Undocumented)
    with pytest.raises(ValueError, match=r"Undocumented: beta"):
        _generator().render()
    Undocumented.__doc__ = Undocumented.__doc__.replace(
        "alpha: documented.", "alpha: documented.\n            beta: documented too."
    )
    assert "### strategy `undocumented`" in _generator().render()


def _rules(text):
    """[(key, condition)] of the rules-across-keys table."""
    part = text.split("\n## Rules across keys", 1)[1].split("\n## ", 1)[0]
    out = []
    for line in part.splitlines():
        m = re.match(r"\| `([\w.]+)` \| `(.+?)` \|", line)
        if m:
            out.append((m.group(1), html.unescape(m.group(2))))
    return out


def test_the_cross_key_rules_are_stated():
    keys = [k for k, _ in _rules(PAGE.read_text())]
    for key in ("model.bn_splits", "loss.symmetric", "loss.contrast_queue", "model.sync_bn"):
        assert key in keys
    rows = _rows(PAGE.read_text())
    # no error message left in an "accepts" cell: the cross-key checks are in the rules table
    assert "exclude each other" not in rows["model.sync_bn"][3]
    assert "rules across keys" in rows["model.sync_bn"][3]


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"model": {"bn_splits": 3}},
        {"model": {"bn_splits": 256}},
        {"model": {"bn_splits": 2, "sync_bn": True}},
        {"loss": {"symmetric": True}},
        {"loss": {"name": "nt_xent", "symmetric": True}},
        {"loss": {"name": "infonce", "contrast_queue": False}},
        {"loss": {"name": "nt_xent", "contrast_queue": False}},
        {"negatives": {"name": "adco"}},
        {"negatives": {"name": "adco"}, "loss": {"name": "nt_xent", "contrast_queue": False}},
        {"negatives": {"name": "mochi"}, "loss": {"name": "supcon", "symmetric": True}},
        {"loss": {"name": "cider"}, "data": {"name": "stl10", "train_split": "train+unlabeled"}},
        {"train": {"lr_first_epoch": 1, "warmup_epochs": 2.0}},
    ],
)
def test_the_stated_rules_decide_as_validate_does(overrides):
    """Each stated condition, evaluated on a config, says what validate() does: the config passes
    when all hold, else validate names the key of the first rule that fails."""
    cfg = config.merge(config.Config(), overrides, source="test")
    scope = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    scope["LossConfig"] = config.LossConfig
    failing = [key for key, cond in _rules(PAGE.read_text()) if not eval(cond, {}, scope)]
    if not failing:
        config.validate(cfg)
        return
    with pytest.raises(config.ConfigError, match=rf"^config key '{re.escape(failing[0])}'"):
        config.validate(cfg)
