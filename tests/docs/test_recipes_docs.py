"""The per-method recipes (docs/recipes/) stay true to the code: every registered negative strategy
(``negatives.list_strategies()``) and every registered loss (``pretrain.losses.list_losses()``)
has a recipe page naming it in a heading; every shipped config appears in a recipe; every
``python -m pretrain`` command on the pages names a shipped config that loads with its overrides
(``pretrain.config.load``: the YAML, the overrides and every cross-key rule, no training) and
trains the method of its page; every "What to expect" section says when and where its numbers
were measured."""

from __future__ import annotations

import re
import shlex

import pytest

import negatives
from pretrain import config, losses
from tests.helpers.paths import ROOT

RECIPES = ROOT / "docs" / "recipes"
PAGES = sorted(p for p in RECIPES.glob("*.md") if p.name != "index.md")

FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)
SPAN = re.compile(r"`(python -m pretrain [^`]*)`")
HEADING = re.compile(r"^#{1,6} (.*)$", re.M)
TICKED = re.compile(r"`([^`]+)`")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
CELL = re.compile(r"(?<!\\)\|")  # a table cell boundary (not an escaped pipe)
MACHINE = re.compile(r"\b(CPU|H100|H200|EPYC|Xeon|V100)\b")


def _heading_names(text: str) -> set[str]:
    """The backticked names in the page's headings (`# MoCHi (`mochi`, `modified_mochi`)`)."""
    return {name for h in HEADING.findall(text) for name in TICKED.findall(h)}


def _commands(text: str) -> list[str]:
    """Every `python -m pretrain ...` command: the lines of fenced blocks (backslash continuations
    joined) and the inline code spans of tables and prose."""
    found = []
    for block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip() if " #" in line else line.strip()
            if line.startswith("python -m pretrain "):
                found.append(line)
    found += [m for m in SPAN.findall(text)]
    return found


COMMANDS = [(page.name, cmd) for page in PAGES for cmd in _commands(page.read_text())]


def test_the_recipes_exist_and_are_listed_on_the_overview():
    assert len(PAGES) >= 15, [p.name for p in PAGES]
    index = (RECIPES / "index.md").read_text()
    for page in PAGES:
        assert f"]({page.name})" in index, f"{page.name} is not linked from docs/recipes/index.md"


GENERATED = (ROOT / "docs" / "configuration.md").read_text()


@pytest.mark.parametrize("name", negatives.list_strategies())
def test_every_registered_strategy_has_a_page(name):
    """A recipe page naming it in a heading, or (a hand-written recipe is optional for one's own
    strategy) its generated section of the configuration reference; an installed plugin's docs
    are its package's."""
    if negatives.strategies.origin(name):
        pytest.skip(f"{name}: an installed plugin ({negatives.strategies.origin(name)})")
    pages = [p.name for p in PAGES if name in _heading_names(p.read_text())]
    assert pages or f"### strategy `{name}`" in GENERATED, (
        f"negatives.name {name!r} is named in no recipe heading (docs/recipes/*.md) and has no "
        "section in docs/configuration.md: run python scripts/gen_config_docs.py"
    )


@pytest.mark.parametrize("name", losses.list_losses())
def test_every_registered_loss_has_a_page(name):
    if losses.registry.origin(name):
        pytest.skip(f"{name}: an installed plugin ({losses.registry.origin(name)})")
    pages = [p.name for p in PAGES if name in _heading_names(p.read_text())]
    assert pages or f"### loss `{name}`" in GENERATED, (
        f"loss.name {name!r} is named in no recipe heading (docs/recipes/*.md) and has no section "
        "in docs/configuration.md: run python scripts/gen_config_docs.py"
    )


def test_the_built_ins_keep_their_recipes():
    """The 18 built-in methods (6 strategies, 12 losses) keep their hand-written recipes: a
    recipe heading that lost its method's name fails here."""
    named = {n for p in PAGES for n in _heading_names(p.read_text())}
    assert len(named & {*negatives.list_strategies(), *losses.list_losses()}) >= 18, named


def test_every_shipped_config_appears_in_a_recipe():
    text = "\n".join(p.read_text() for p in PAGES)
    missing = [p.name for p in sorted(config.CONFIG_DIR.glob("*.yaml")) if p.name not in text]
    assert not missing, f"shipped configs named by no recipe: {missing}"


def test_the_pages_have_commands():
    assert len(COMMANDS) >= 2 * len(PAGES), len(COMMANDS)
    assert {page for page, _ in COMMANDS} == {p.name for p in PAGES}


@pytest.mark.parametrize(("page", "command"), COMMANDS, ids=[f"{p}:{c}" for p, c in COMMANDS])
def test_every_command_loads_a_shipped_config_of_its_method(page, command):
    args = shlex.split(command)[3:]  # after "python -m pretrain"
    assert args[0] == "--cfg", f"{page}: {command!r} must start with --cfg CONFIG"
    name = args[1]
    assert (config.CONFIG_DIR / name).is_file(), f"{page}: {name!r} is not a shipped config"
    overrides = [a for a in args[2:] if a != "..."]
    assert all("=" in a and not a.startswith("-") for a in overrides), (page, overrides)
    cfg = config.load(name, overrides)
    trains = {cfg.loss.name, cfg.negatives.name}
    if cfg.kappa.hidden > 0:
        trains.add("kappa.hidden")
    names = _heading_names((RECIPES / page).read_text())
    assert trains & names, f"{page}: {command!r} trains {sorted(trains)}, the page is {names}"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_what_to_expect_says_when_and_where(page):
    text = page.read_text()
    assert "## What to expect" in text, f"{page.name} has no 'What to expect' section"
    section = text.split("## What to expect", 1)[1]
    assert DATE.search(section) and MACHINE.search(section), page.name
    # a table with a "date, machine" column: every row names both
    for table in re.findall(r"(?:^\|.*\n)+", section, re.M):
        rows = table.strip().splitlines()
        header = [c.strip() for c in CELL.split(rows[0].strip().strip("|"))]
        if "date, machine" not in header:
            continue
        col = header.index("date, machine")
        for row in rows[2:]:
            cell = CELL.split(row.strip().strip("|"))[col]
            assert DATE.search(cell) and MACHINE.search(cell), f"{page.name}: {row}"
