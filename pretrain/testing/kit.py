"""The contract kit's checks of one class, each named ([`checks`][pretrain.testing.kit.checks]), as
scikit-learn's ``check_estimator`` / ``parametrize_with_checks`` name theirs:
[`parametrize_with_checks`][pretrain.testing.kit.parametrize_with_checks] gives pytest one test per
(class, check), so every failing check shows at once, with its name in the test id
(``BatchMix-check_records``); [`check_strategy`][pretrain.testing.kit.check_strategy] /
[`check_loss`][pretrain.testing.kit.check_loss] run them in order and stop at the first
failure. Each failure is a [`ContractError`][pretrain.testing.ContractError] naming the class, the
attribute or hook and what to change; the measured counts go into the class's
[`Report`][pretrain.testing.kit.Report] (the pytest plugin prints them)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from negmine_core.contract.messages import ContractError, kind_of, label
from pretrain.testing import behaviour
from pretrain.testing.cuda_graph import check_cuda_graph_refusal
from pretrain.testing.declarations import check_declarations
from pretrain.testing.ops import check_ops
from pretrain.testing.syncs import check_syncs


@dataclass
class Report:
    """What the kit measured of one class."""

    kind: str
    cls: str
    syncs_per_step: int = 0  # measured (= declared, or the kit raised)
    ops: int = 0  # aten ops per training step on digits_moco
    plain_moco: int = 0  # plain MoCo's, measured beside it
    budget: float = 0.0  # the fraction allowed over plain MoCo
    cuda_graphs: str = ""  # the refusal, or "accepted"
    done: list[str] = field(default_factory=list)  # the checks that ran

    def line(self) -> str:
        """One line for a test report."""
        added = (self.ops - self.plain_moco) / self.plain_moco if self.plain_moco else 0.0
        ops = "ops not counted"
        if self.ops:
            ops = (
                f"{self.ops} aten ops per step ({added:+.1%} over plain MoCo's "
                f"{self.plain_moco}; budget +{self.budget:.0%})"
            )
        return (
            f"{self.kind} {self.cls}: {self.syncs_per_step} host syncs per step (as "
            f"declared), {ops}; train.cuda_graphs: {self.cuda_graphs}"
        )


REPORTS: list[Report] = []  # every report of this process, for the pytest plugin's summary


def report_of(cls: type) -> Report:
    """This process's report of ``cls`` (made at its first check)."""
    name = f"{label(cls)!r} ({cls.__module__}.{cls.__qualname__})"
    for report in REPORTS:
        if report.cls == name:
            return report
    REPORTS.append(Report(kind_of(cls), name))
    return REPORTS[-1]


def check_class(cls: type) -> None:
    """ContractError unless ``cls`` is a subclass of its kind's base class."""
    if kind_of(cls) == "strategy":
        from negatives.base import NegativeStrategy as Base
    else:
        from pretrain.losses import Loss as Base
    if not (isinstance(cls, type) and issubclass(cls, Base)):
        raise ContractError(f"{cls!r} is not a {Base.__module__}.{Base.__qualname__} subclass")


def _cuda_graphs(cls: type) -> None:
    refusal = check_cuda_graph_refusal(cls)
    report_of(cls).cuda_graphs = refusal or "accepted"


def _syncs(cls: type) -> None:
    report_of(cls).syncs_per_step = check_syncs(cls)["counts"][0]


def _ops(cls: type) -> None:
    got, report = check_ops(cls), report_of(cls)
    report.ops, report.plain_moco, report.budget = got["ops"], got["plain_moco"], got["budget"]


def _ranks(cls: type) -> None:
    from pretrain.testing.ddp import check_ranks

    check_ranks(cls)


@dataclass(frozen=True)
class Check:
    """One named check of the kit; ``skip``: why it does not apply to the class (then it is
    reported as skipped with that reason)."""

    name: str
    run: Callable[[type], Any]
    skip: str = ""

    def __call__(self, cls: type) -> None:
        self.run(cls)
        report_of(cls).done.append(self.name)

    def __repr__(self) -> str:
        return self.name


def checks(cls: type, *, counts: bool = True) -> list[Check]:
    """The kit's checks of ``cls``, fast ones first; ``counts=False`` leaves out the counted
    training steps (host syncs, aten ops: ~10-20 s on a CPU)."""
    check_class(cls)
    b = behaviour
    if kind_of(cls) == "strategy":
        zero = "" if cls.zero_kwargs is not None else "zero_kwargs = None: no plain-MoCo limit"
        ranks = "" if cls.ddp_check else "ddp_check = False: draws within its rank"
        own = [
            Check("check_records", b.check_records),
            Check("check_determinism", b.check_strategy_determinism),
            Check("check_transform_batch", b.check_transform_batch),
            Check("check_zero_kwargs", b.check_zero_kwargs, skip=zero),
        ]
        last = [Check("check_ranks", _ranks, skip=ranks)]
    else:
        used = "accepts strategy none only" if b.takes_no_negatives(cls) else ""
        own = [
            Check("check_loss_value", b.check_loss_value),
            Check("check_determinism", b.check_loss_determinism),
            Check("check_gradients", b.check_gradients),
            Check("check_extra_negatives_used", b.check_extra_negatives_used, skip=used),
        ]
        last = []
    counted = [Check("check_syncs", _syncs), Check("check_ops", _ops)] if counts else []
    return [
        Check("check_declarations", check_declarations),
        *own,
        Check("check_cuda_graph_refusal", _cuda_graphs),
        *counted,
        *last,
    ]


def parametrize_with_checks(classes: Iterable[type], *, counts: bool = True) -> Any:
    """A ``pytest.mark.parametrize`` of ``(cls, check)`` over every check of every class, one
    test id each (``MyStrategy-check_records``); a check that does not apply is skipped with its
    reason::

        @parametrize_with_checks([MyStrategy, MyLoss])
        def test_contract(cls, check):
            check(cls)
    """
    import pytest

    params = [
        pytest.param(
            cls,
            check,
            id=f"{cls.__name__}-{check.name}",
            marks=[pytest.mark.skip(reason=check.skip)] if check.skip else [],
        )
        for cls in classes
        for check in checks(cls, counts=counts)
    ]
    return pytest.mark.parametrize(("cls", "check"), params)


def _check(cls: type, counts: bool) -> Report:
    for check in checks(cls, counts=counts):
        if not check.skip:
            check(cls)
    return report_of(cls)


def check_strategy(cls: type, *, counts: bool = True) -> Report:
    """Every contract check of negative strategy ``cls`` (a class: registered or not), in
    order. The counts (host syncs, aten ops: real training steps on digits, ~10-20 s on a CPU)
    run unless ``counts=False``. ContractError on the first failure."""
    if kind_of(cls) != "strategy":
        raise ContractError(f"{cls!r} is not a negatives.NegativeStrategy subclass")
    return _check(cls, counts)


def check_loss(cls: type, *, counts: bool = True) -> Report:
    """Every contract check of loss ``cls`` (a ``pretrain.losses.Loss`` subclass); as
    [`check_strategy`][pretrain.testing.kit.check_strategy]."""
    return _check(cls, counts)


__all__ = [
    "Check",
    "ContractError",
    "Report",
    "check_loss",
    "check_strategy",
    "checks",
    "parametrize_with_checks",
]
