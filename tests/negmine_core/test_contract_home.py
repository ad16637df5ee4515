"""The contract in one home (negmine_core.contract): one flag table that every consumer reads,
one registry helper for a test's class, the kit's checks one pytest id each, and no copy of the
contract left in the trainer or in tests/."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest
import torch

import negatives
from negatives import ExtraNegatives, NegativeStrategy, Step
from negmine_core import contract
from negmine_core.contract import FLAGS, ContractError, Flag
from negmine_core.contract.declarations import check_declarations
from pretrain.config import rules
from pretrain.losses.base import DECLARED
from pretrain.testing import contract_docs, kit
from tests.helpers.paths import ROOT


def test_the_old_homes_and_the_shims_are_gone():
    for module in ("pretrain.engine.boundary", "pretrain.engine.records",
                   "pretrain.engine.failures", "pretrain.testing.op_counter",
                   "pretrain.testing.sync_counter", "negmine_core.contract.contract"):  # fmt: skip
        assert importlib.util.find_spec(module) is None, module
    for shim in ("op_counter.py", "sync_counter.py", "fakedata.py"):
        assert not (ROOT / "tests" / shim).exists(), shim


def test_no_module_keeps_first_step_flags():
    """The per-step checks' state lives on the run's StepWatch, not in module-level dicts."""
    from negmine_core.contract import watch

    state = {n: v for n, v in vars(watch).items() if not n.startswith("__")}
    held = [n for n, v in state.items() if isinstance(v, dict | set) or "Weak" in type(v).__name__]
    assert held == []


class Tagged(NegativeStrategy):
    """A strategy declaring a flag the table does not have yet."""

    tagged = True


def test_a_new_flag_is_one_row_of_the_table(monkeypatch):
    """A row in FLAGS (with the attribute on the class) is enough: the declaration check types
    it, the generated docs name its type, and the config rules list the names that set it."""
    row = Flag("tagged", "strategy", (bool,), "True or False", names="tagged_strategies")
    monkeypatch.setattr(contract.declarations, "FLAGS", (*FLAGS, row))
    monkeypatch.setattr(contract, "FLAGS", (*FLAGS, row))
    monkeypatch.setattr(contract_docs, "FLAGS", (*FLAGS, row))
    monkeypatch.setattr(NegativeStrategy, "tagged", False, raising=False)
    with negatives.strategies.registered("tagged_one", Tagged):
        assert rules.registry_names()["tagged_strategies"] == ("tagged_one",)
        check_declarations(Tagged)
        monkeypatch.setattr(Tagged, "tagged", "yes")
        with pytest.raises(ContractError, match=r"Tagged\.tagged\): is 'yes': declare True or"):
            check_declarations(Tagged)
    assert contract_docs.checked_by("tagged") == "type: True or False"


def test_the_consumers_read_the_flag_table():
    """The config rules' lists and the kappa wrapper's copied declarations are the table's."""
    listed = {f.names for f in FLAGS if f.names}
    assert set(rules.registry_names()) == listed
    assert set(DECLARED) == {"name"} | {f.attribute for f in FLAGS if f.kind == "loss"}
    for flag in FLAGS:
        assert contract_docs.checked_by(flag.attribute) == f"type: {flag.holds}"


class Local(NegativeStrategy):
    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives(shared=s.emb.k[:1])


def test_a_class_is_registered_for_a_block_only():
    reg = negatives.strategies
    with reg.registered("local_one", Local) as name:
        assert name == "local_one" and reg.get("local_one") is Local
        assert reg.name_of(Local) == "local_one" and Local.name == "local_one"
        with reg.registered("other", Local) as again:  # held already: its own name
            assert again == "local_one"
    assert "local_one" not in reg and reg.name_of(Local) is None
    assert "name" not in vars(Local)
    with pytest.raises(ValueError, match="'none' is already registered"):
        with reg.registered("none", Local):
            pass
    assert "none" in reg and reg.name_of(Local) is None


class TwoFaults(NegativeStrategy):
    """A wrong declaration and a record that carries a gradient: two checks fail."""

    capturable = "yes"
    scale = torch.nn.Parameter(torch.ones(()))

    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives(shared=s.emb.k[:2] * self.scale)


def test_every_failing_check_shows_on_its_own():
    """As scikit-learn's parametrize_with_checks: one id per (class, check); each check runs
    alone, so both faults show, where check_strategy stops at the first."""
    names = [c.name for c in kit.checks(TwoFaults, counts=False)]
    assert names == ["check_declarations", "check_records", "check_determinism",
                     "check_transform_batch", "check_zero_kwargs", "check_cuda_graph_refusal",
                     "check_ranks"]  # fmt: skip
    failed = {}
    for check in kit.checks(TwoFaults, counts=False):
        if check.skip:
            continue
        try:
            check(TwoFaults)
        except ContractError as e:
            failed[check.name] = str(e)
    assert "capturable): is 'yes'" in failed["check_declarations"]
    assert "carries a gradient" in failed["check_records"]
    with pytest.raises(ContractError, match="capturable"):
        kit.check_strategy(TwoFaults, counts=False)


def test_the_ids_name_the_class_and_the_check_and_skips_say_why():
    mark = kit.parametrize_with_checks([TwoFaults, Local], counts=False)
    assert mark.args[0] == ("cls", "check")
    params = mark.args[1]
    ids = [p.id for p in params]
    assert ids[:2] == ["TwoFaults-check_declarations", "TwoFaults-check_records"]
    assert "Local-check_records" in ids and len(ids) == 14
    skipped = {p.id: p.marks[0].kwargs["reason"] for p in params if p.marks}
    assert skipped == {
        "TwoFaults-check_zero_kwargs": "zero_kwargs = None: no plain-MoCo limit",
        "TwoFaults-check_ranks": "ddp_check = False: draws within its rank",
        "Local-check_zero_kwargs": "zero_kwargs = None: no plain-MoCo limit",
        "Local-check_ranks": "ddp_check = False: draws within its rank",
    }
    assert all(dataclasses.is_dataclass(p.values[1]) for p in params)
