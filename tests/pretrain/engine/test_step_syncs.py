"""Every valid loss x strategy pair (+ the kappa head, + split BN's Triton path) syncs the
documented number of times per training step, the first one and steady-state ones, in one process
and at 2 gloo ranks (tests/helpers/count_steps.py; the Triton kernels in Triton's interpreter on a
CPU)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

import negatives
from pretrain import losses
from tests.helpers import sync_table
from tests.helpers.ddp import free_port, run_worker
from tests.helpers.paths import HELPERS, ROOT

pytestmark = pytest.mark.early  # among the suite's longest files: started first (tests/conftest.py)

WORKER = HELPERS / "count_steps.py"


# the 2-rank count (82 s of setup on 2 cores) needs --runslow: one process measures
# every pair's syncs per step in the default suite
@pytest.fixture(
    scope="module", params=[1, pytest.param(2, marks=pytest.mark.slow)], ids=["one_process", "ddp2"]
)
def counted(request, tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp(f"syncs{request.param}") / "counts"
    if request.param == 1:
        run_worker(sys.executable, str(WORKER), str(out), timeout=450)
    else:
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1"]
        torchrun += ["--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
        torchrun += ["--master_port", str(free_port())]
        run_worker(*torchrun, str(WORKER), str(out), timeout=900)
    return [json.loads(Path(f"{out}.rank{r}").read_text()) for r in range(request.param)]


def test_every_registered_objective_and_strategy_declares_a_count():
    """Fast, before the slow counting below: every registered loss and strategy (plugins
    included) declares a whole, non-negative count and says why where it is not 0."""
    for kind, registry in (("loss", losses.registry), ("strategy", negatives.strategies)):
        for name in registry.names():
            cls = registry.get(name)
            n = cls.syncs_per_step
            where = f"{kind} {name!r} ({cls.__module__}.{cls.__qualname__}.syncs_per_step)"
            assert isinstance(n, int) and not isinstance(n, bool) and n >= 0, f"{where}: {n!r}"
            assert n == 0 or cls.syncs_why, f"{where} = {n}: say why in syncs_why"


def test_each_valid_pair_syncs_the_documented_number_of_times(counted):
    for result in counted:
        pairs = [k for k in result if "/" in k]
        assert len(pairs) >= 20, pairs  # every loss x strategy the config accepts
        assert "cider/mochi" in result["invalid"]  # refused pairs are left out, not counted
        assert {"fnc/none", "nt_xent/adco", "ring/mochi", "imix/mioc"} <= set(pairs)
        # split BN's Triton path (interpreted on a CPU) with MiOC's Triton fit; infonce/mioc is
        # counted without it, so split BN's own share is the difference of two exact counts
        assert {"infonce+split_bn/mioc", "infonce/mioc"} <= set(pairs)
        for pair in pairs:
            got = result[pair]
            assert len(got["counts"]) == 2
            sync_table.check(pair, got)
            if pair.endswith("/mioc"):
                assert got["solver_syncs"] == [0, 0]  # the Triton fit (its CUDA path) ran


def test_docs_sync_table_shows_the_declared_counts():
    """docs/step_counts.md lists each registered loss's and strategy's count of this tree
    (generated; an installed plugin is left out)."""
    text = (ROOT / "docs" / "step_counts.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z_+]+)` \| ([^|]+?) \|", text, flags=re.M))
    for kind, registry in (("loss", losses.registry), ("strategy", negatives.strategies)):
        for name in registry.names():
            if registry.origin(name):  # an installed plugin: not on this tree's page
                continue
            assert rows.get(name) == str(registry.get(name).syncs_per_step), (kind, name)
    assert rows.get("kappa") == str(sync_table.KAPPA_SYNCS[0])
    assert rows.get("split_bn") == str(sync_table.SPLIT_BN_SYNCS[0])
