"""docs/plugins.md lists every attribute and hook of both base classes, generated from the code
(scripts/gen_plugin_docs.py, pretrain.testing.contract_docs), and a member without a ``#:``
comment or docstring fails here, so a new attribute cannot go undocumented; the sizes the page
states are the kit's own."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import ClassVar

from negatives import ExtraNegatives, NegativeStrategy, Step
from negmine_core.contract import Contract
from pretrain.testing import behaviour, contract_docs, steps
from tests.helpers.paths import ROOT

PAGE = (ROOT / "docs" / "plugins.md").read_text()
FLAT = " ".join(PAGE.split())  # the prose with its line breaks as spaces


def script():
    spec = importlib.util.spec_from_file_location("gen_plugin_docs", ROOT / "scripts" /
                                                  "gen_plugin_docs.py")  # fmt: skip
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_member_of_the_bases_has_a_comment_or_docstring():
    for cls in contract_docs.bases().values():
        assert contract_docs.undocumented(cls) == [], cls


def test_an_attribute_added_without_a_comment_is_found():
    class Grown(Contract):
        #: documented
        kept: ClassVar[int] = 1
        added: ClassVar[int] = 2

        def hook(self) -> None:
            pass

    assert contract_docs.undocumented(Grown) == ["Grown.added", "Grown.hook"]


def test_the_page_is_current_and_lists_every_member():
    assert script().main(["--check"]) == 0, "run python scripts/gen_plugin_docs.py"
    for cls in contract_docs.bases().values():
        for m in contract_docs.members(cls):
            cell = f"| `{m.name}` |" if m.kind == "attribute" else f"| `{m.name}("
            assert cell in PAGE, (cls, m.name)
    for hook in ("negatives", "check_sizes", "bad_input", "forward",
                 "setup", "transform_batch"):  # fmt: skip
        assert f"| `{hook}(self" in PAGE, hook


def test_a_stale_page_is_refused(tmp_path, monkeypatch):
    gen = script()
    stale = PAGE.replace("| `symmetric_ok` |", "| `symmetric_okay` |")
    (tmp_path / "plugins.md").write_text(stale)
    monkeypatch.setattr(gen, "PAGE", tmp_path / "plugins.md")
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0 and (tmp_path / "plugins.md").read_text() == PAGE


def test_the_sizes_the_page_states_are_the_kits():
    n, d, k = behaviour.N, behaviour.D, behaviour.K
    assert f"a strategy: batch {n}, width {d}, a {k}-key queue" in FLAT
    assert f"a loss: {behaviour.LOSS_N} queries, a {behaviour.LOSS_K}-key queue" in FLAT
    assert f"{behaviour.CLASSES} classes" in FLAT
    assert {"train.batch_size=16", "moco.queue_size=64"} <= set(steps.SYNC_SIZES)
    assert {"train.batch_size=16", "moco.queue_size=64"} <= set(steps.OP_SIZES)
    assert "(batch 16, a 64-key queue)" in FLAT
    assert "queue 32, batch 8" not in FLAT


class Documented(NegativeStrategy):
    """A plugin's strategy (a test class), documented as the built-ins are.

    Args:
        gamma: how much, in [0, 1].
    """

    syncs_per_step = 1
    syncs_why = "one .item() for the demo"

    def __init__(self, gamma: float = 0.5) -> None:
        super().__init__()
        if not 0 <= gamma <= 1:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        self.gamma = gamma

    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives()


def gen_config_docs():
    spec = importlib.util.spec_from_file_location("gen_config_docs", ROOT / "scripts" /
                                                  "gen_config_docs.py")  # fmt: skip
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_plugins_reference_entry_is_printed_on_demand(capsys):
    """``gen_config_docs.py --plugin NAME``: the entry a built-in gets on the configuration
    reference (summary, class and file, contract sentence, settings table), for a plugin."""
    gen = gen_config_docs()
    with steps.registered(Documented) as name:
        assert gen.main(["--plugin", name]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"### Strategy `{name}`\n\nA plugin's strategy (a test class)"), out
    assert f"`Documented` in `{Path(__file__).resolve().relative_to(ROOT)}`" in out, out
    assert "Declares 1 host sync(s) per step (one .item() for the demo); refused with " in out
    assert "| `gamma` | `float` | `0.5` |" in out and "how much, in [0, 1]." in out, out
    assert gen.main(["--plugin", "no_such_plugin"]) == 2
    assert "no strategy or loss 'no_such_plugin' is registered here" in capsys.readouterr().err
