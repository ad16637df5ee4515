"""Shared pytest hooks: ``slow`` tests need ``--runslow``; ``cuda`` tests need a CUDA device
(``@pytest.mark.cuda(gpus=2)``: that many); a hang in interpreter teardown cannot eat the session's
verdict (``teardown_guard.py``).

The suite trains on the CPU on any host: ``NEGMINE_DEVICE=cpu``
(``pretrain.runtime.dist.device_type``) is set here, before any test runs, and every process a test
starts inherits it, so the DDP tests' ranks form gloo groups on CPU tensors even where CUDA is
visible (several ranks cannot share one GPU under NCCL). A ``cuda`` test that trains on the GPU asks
for it with the ``on_cuda`` fixture (or ``NEGMINE_DEVICE=cuda`` in its subprocess's environment).

``python -m pytest -m quick`` is a first check of under a minute (the whole suite takes ~8-9 minutes
on 2 cores): the tests of ``QUICK_FILES``, in-process unit tests of every package (pretrain,
negatives, linear_eval, slurm), are marked ``quick``; under ``-m quick`` a test that starts a
process (``subprocess``, ``multiprocessing``: a CLI run, DDP ranks, loader workers, a SLURM job)
is skipped when it tries, so a slow test added to one of these files leaves the subset by itself
(it still runs in the full suite). ``tests/test_quick_subset.py`` checks the list.

The suite runs in parallel by default: ``python -m pytest`` starts one pytest-xdist worker per core
(``NEGMINE_TEST_WORKERS`` sets the count; ``-n 0`` runs in one process, as does a run of named
files or tests, ``path.py`` or ``path::test``, or a pytest started by a test) with
``--dist loadgroup``. Each worker runs torch on its share of the cores (one thread on 2 cores:
``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` and ``torch.set_num_threads``, inherited by the processes
its tests start). What tests share across workers is kept apart by two rules (``xdist_group``):

- a test that uses a module-, class- or session-scoped fixture of this suite runs on the worker
  that built it (one group per fixture and parameter), so that such a fixture (DDP runs, a site
  build, a compile, the local SLURM cluster that one worker brings up and down) is built once;
- a test marked ``exclusive(name)`` runs on the same worker as every other test of that name.

xdist hands out groups first (largest first), then single tests in collection order; a test of
minutes is marked ``early`` so that it starts first instead of ending the run alone.

Environment variables and ``NEGMINE_CACHE_DIR`` set by a test are per process, each worker's free
ports come from its own range (``test_ddp.free_port``), and inductor's and Triton's caches are
written atomically (shared on purpose: a kernel compiled by one worker is loaded by the other)."""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
from pathlib import Path

# Inductor compiles in-process with one thread: no compile-worker pool, whose shutdown at exit is a
# known source of hangs (pytorch#162199, #189290) and which a test's subprocesses inherit this way
# too. Set before torch is imported, since inductor reads it when its config is first imported.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
os.environ["NEGMINE_DEVICE"] = "cpu"  # pretrain.runtime.dist.DEVICE_ENV: gloo and CPU tensors
# everywhere


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity mask (macOS)
        return max(1, os.cpu_count() or 1)


WORKERS_ENV = "NEGMINE_TEST_WORKERS"  # pytest-xdist workers for a plain `python -m pytest`


def default_workers() -> int:
    """Workers for a run that did not pass ``-n``: ``$NEGMINE_TEST_WORKERS``, else one per core."""
    env = os.environ.get(WORKERS_ENV, "").strip()
    return max(0, int(env)) if env else _cores()


# An xdist worker runs torch on its share of the cores: set before torch is imported (OpenMP reads
# these once) and inherited by the processes its tests start.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _share = max(1, _cores() // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_name] = str(_share)

import pytest  # noqa: E402
import torch  # noqa: E402
from teardown_guard import pytest_sessionfinish, pytest_unconfigure  # noqa: E402, F401 (hooks)

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(_share)

TESTS = Path(__file__).resolve().parent

#: The quick subset (``-m quick``), paths under tests/: fast in-process tests of each package.
QUICK_FILES = (
    # pretrain
    "test_config.py",  # the config schema, overrides and validation
    "test_config_docs.py",  # the generated configuration reference
    "test_model.py",
    "test_checkpoint.py",
    "test_schedules.py",
    "test_queue.py",
    "test_knn.py",
    "test_threads.py",
    "test_losses.py",
    "test_multiview_losses.py",
    "test_queue_layout_loss.py",
    "test_reweighted_losses.py",
    "test_ring.py",
    "test_cider_loss.py",
    # negatives
    "test_negatives.py",  # every strategy in a training step
    "test_ocsvm.py",
    "test_mochi.py",
    "test_outliers.py",
    # linear_eval
    "evaluation/test_metrics.py",
    "evaluation/test_stats.py",
    "evaluation/test_table.py",
    "evaluation/test_select.py",
    # slurm: time formats and the checks before submitting
    "test_slurm.py",
)


def quick_run(config: pytest.Config) -> bool:
    """Whether this session selects the quick subset (``-m quick``)."""
    return (config.getoption("markexpr", "") or "").strip() == "quick"


def pytest_itemcollected(item):
    """Mark the tests of QUICK_FILES ``quick`` (before ``-m`` selects)."""
    path = item.path.resolve()
    if path.is_relative_to(TESTS) and path.relative_to(TESTS).as_posix() in QUICK_FILES:
        item.add_marker(pytest.mark.quick)


def _no_process(*args, **kwargs):
    pytest.skip("starts a process: not part of the quick subset (it runs in the full suite)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under ``-m quick``, starting a process skips the test (in its setup, call or teardown:
    module fixtures that start one skip their tests too)."""
    if not quick_run(item.config):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "__init__", _no_process)
        patch.setattr(multiprocessing.process.BaseProcess, "start", _no_process)
        yield


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "exclusive(name): runs on one pytest-xdist worker with every test of that name"
    )
    config.addinivalue_line(
        "markers", "early: a test of minutes, started first so that it does not end the run alone"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """``python -m pytest`` runs on pytest-xdist workers (one per core, ``--dist loadgroup``)
    unless ``-n`` was given, xdist is absent or disabled (``-p no:xdist``), the run names files or
    tests (``path.py``, ``path::test``: run them with ``-n 2`` to spread them), or this pytest runs
    inside a test (a nested run stays in one process)."""
    if not config.pluginmanager.has_plugin("xdist") or not hasattr(config.option, "numprocesses"):
        return
    if config.option.numprocesses is not None or config.option.collectonly:
        return
    nested = "PYTEST_CURRENT_TEST" in os.environ or "PYTEST_XDIST_WORKER" in os.environ
    named = [a for a in config.args if "::" in str(a) or not Path(str(a)).is_dir()]
    if nested or named:  # some files or tests: workers' start-up (~10 s each) would not pay
        return
    workers = default_workers()
    if workers > 1:
        config.option.numprocesses = workers
        config.option.tx = ["popen"] * workers  # what xdist makes of it, whichever hook is first
        if config.option.dist == "no":
            config.option.dist = "loadgroup"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Tell each worker the distribution mode: a worker parses the command line again, where a
    ``--dist`` set by :func:`pytest_cmdline_main` is not."""
    node.workerinput["negmine_dist"] = node.config.option.dist


def _shared_fixture_group(item: pytest.Item) -> str | None:
    """The group of a test that uses a module-, class- or session-scoped fixture of this suite
    (not one of pytest's own): that fixture's id with its parameter, so that it is built once."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    params = getattr(getattr(item, "callspec", None), "params", {})
    for name in sorted(info.name2fixturedefs):
        fixturedef = info.name2fixturedefs[name][-1]
        if fixturedef.scope == "function" or not fixturedef.baseid:  # "": a plugin's fixture
            continue
        param = f"/{params[name]}" if name in params else ""
        group = f"{fixturedef.baseid}::{name}{param}"  # xdist reads the group after the last
        return group.replace("[", "(").replace("]", ")")  # "]" of a test id: none after it
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    if getattr(config, "workerinput", {}).get("negmine_dist") == "loadgroup":
        config.option.loadgroup = True  # xdist's worker hook groups by it
    items.sort(key=lambda item: item.get_closest_marker("early") is None)  # stable: early first
    for item in items:
        exclusive = item.get_closest_marker("exclusive")
        group = exclusive.args[0] if exclusive is not None else _shared_fixture_group(item)
        if group is not None:
            group = group.replace("[", "(").replace("]", ")")
            item.add_marker(pytest.mark.xdist_group(group))
    skip_slow = pytest.mark.skip(reason="needs --runslow")
    run_slow = config.getoption("--runslow")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(skip_slow)
        marker = item.get_closest_marker("cuda")
        if marker is not None:
            need = marker.kwargs.get("gpus", 1)
            if gpus < need:
                why = "needs a CUDA device" if need == 1 else f"needs {need} CUDA devices"
                item.add_marker(pytest.mark.skip(reason=f"{why} (found {gpus})"))


@pytest.fixture(scope="session")
def triton_launches(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every Triton kernel launched through Triton's launch path for sm_90 without a GPU, once per
    session and triton (``tests/triton_launches.py``): ``None`` (the installed triton) or an older
    triton's folder -> the worker's JSON (launches, warnings, PTX) or its error output."""
    pytest.importorskip("triton", reason="triton comes with torch's CUDA wheels; not installed")
    from triton_launches import OLDER, launch_all

    for site in OLDER:
        if not Path(site, "triton").is_dir():
            pytest.fail(f"NEGMINE_TRITON_OLDER names {site}, which holds no triton")
    return launch_all([None, *OLDER], tmp_path_factory.mktemp("launch"))


@pytest.fixture
def on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Train on the GPU in this test (and the processes it starts): ``NEGMINE_DEVICE=cuda``."""
    monkeypatch.setenv("NEGMINE_DEVICE", "cuda")
