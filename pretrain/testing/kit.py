"""``check_strategy`` / ``check_loss``: every check of the contract kit on one class, in order
(fast ones first), each failure a :class:`ContractError` naming the class, the attribute or hook
and what to change; the measured counts come back in a :class:`Report` (the pytest plugin prints
them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pretrain.engine.failures import ContractError, kind_of, label
from pretrain.testing.behaviour import check_loss_behaviour, check_strategy_behaviour
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


def _check(cls: type, counts: bool) -> Report:
    kind = kind_of(cls)
    if kind == "strategy":
        from negatives.base import NegativeStrategy as Base
    else:
        from pretrain.losses import Loss as Base
    if not (isinstance(cls, type) and issubclass(cls, Base)):
        raise ContractError(f"{cls!r} is not a {Base.__module__}.{Base.__qualname__} subclass")
    report = Report(kind, f"{label(cls)!r} ({cls.__module__}.{cls.__qualname__})")
    check_declarations(cls)
    report.done.append("declarations")
    (check_strategy_behaviour if kind == "strategy" else check_loss_behaviour)(cls)
    report.done.append(
        "records, determinism, gradients"
        + (", zero_kwargs" if kind == "strategy" else ", extra negatives used")
    )
    refusal = check_cuda_graph_refusal(cls)
    report.cuda_graphs = refusal or "accepted"
    report.done.append("cuda_graphs refusal")
    if counts:
        got = check_syncs(cls)
        report.syncs_per_step = got["counts"][0]
        report.done.append("host syncs per step")
        ops = check_ops(cls)
        report.ops, report.plain_moco, report.budget = ops["ops"], ops["plain_moco"], ops["budget"]
        report.done.append("aten ops per step")
    if kind == "strategy" and cls.ddp_check:
        from pretrain.testing.ddp import check_ranks

        check_ranks(cls)
        report.done.append("2-rank gloo equivalence")
    REPORTS.append(report)
    return report


def check_strategy(cls: type, *, counts: bool = True) -> Report:
    """Every contract check of negative strategy ``cls`` (a class: registered or not). The
    counts (host syncs, aten ops: real training steps on digits, ~10-20 s on a CPU) run unless
    ``counts=False``. ContractError on the first failure."""
    if kind_of(cls) != "strategy":
        raise ContractError(f"{cls!r} is not a negatives.NegativeStrategy subclass")
    return _check(cls, counts)


def check_loss(cls: type, *, counts: bool = True) -> Report:
    """Every contract check of loss ``cls`` (a ``pretrain.losses.Loss`` subclass); as
    :func:`check_strategy`."""
    return _check(cls, counts)


__all__ = ["ContractError", "Report", "check_loss", "check_strategy"]
