"""The contract kit's pytest plugin, registered by negmine's ``pytest11`` entry point
(``negmine``): loaded by every pytest session where negmine is installed, so it imports nothing
heavy until used.

- the fixture ``negmine_contract``: the kit (``negmine_contract.check_strategy(MyStrategy)``);
- the header line names the kit's negmine version;
- the terminal summary shows what the kit measured of each class checked in the session (host
  syncs and aten ops per step against the budget, the CUDA-graph refusal), so the counts are
  seen, not only asserted.
"""

from __future__ import annotations

import importlib.metadata
import sys
from typing import Any

import pytest


def pytest_report_header(config: pytest.Config) -> str:
    """``negmine contract kit: negmine 0.1.0``."""
    try:
        version = importlib.metadata.version("negmine")
    except importlib.metadata.PackageNotFoundError:
        version = "(not installed: from the source tree)"
    return f"negmine contract kit: negmine {version}"


@pytest.fixture
def negmine_contract() -> Any:
    """The kit, :mod:`pretrain.testing` (``check_strategy``, ``check_loss``, ``ContractError``)."""
    import pretrain.testing

    return pretrain.testing


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line per class the kit checked in this session (none when the kit was not used)."""
    kit = sys.modules.get("pretrain.testing.kit")
    if kit is None or not kit.REPORTS:
        return
    terminalreporter.section("negmine contract kit")
    for report in kit.REPORTS:
        terminalreporter.write_line(report.line())
