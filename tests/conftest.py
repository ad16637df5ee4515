"""Shared pytest hooks: ``slow`` tests need ``--runslow``; ``cuda`` tests need a CUDA device
(``@pytest.mark.cuda(gpus=2)``: that many); a hang in interpreter teardown cannot eat the session's
verdict (``tests/helpers/teardown_guard.py``).

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
(it still runs in the full suite). ``tests/suite/test_quick_subset.py`` checks the list.

The suite runs in parallel by default, through pytest-xdist's documented interface only:
pyproject.toml's ``addopts`` gives ``-n auto --dist loadgroup``, and
:func:`pytest_xdist_auto_num_workers` picks the count (``NEGMINE_TEST_WORKERS``, else one worker per
core; none for a run of named files or tests, ``path.py`` or ``path::test``, or a pytest started by
a test; ``-n 0`` on the command line runs in one process). Each worker runs torch on its share of
the cores (one thread on 2 cores: ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` and
``torch.set_num_threads``, inherited by the processes
its tests start).

Distribution is ``--dist loadfile``: every test of a file runs on one worker, so a module-scoped
fixture (DDP runs, a site build, a compile) is built once. (``loadgroup`` with ``xdist_group``
marks is not used: with pytest 9.2 and pytest-xdist 3.8 it silently stops grouping,
pytest-dev/pytest-xdist#1386.) What lives outside a test's process has one owner whatever the
distribution, and never depends on two tests landing on one worker:

- the local SLURM cluster (``tests/helpers/slurm_cluster.py``) is started once per run by the first
  process that needs it, each user holds a lease on it, and the top-level pytest process stops it
  at the end of the session; a stop while another process holds a lease is refused with an
  error naming it;
- a session-scoped result that several files use (the Triton launches) is computed once per run,
  under a lock, and read by the other workers (``tests/helpers/run_once.py``, pytest-xdist's
  documented pattern).

xdist hands out files in collection order (``--no-loadscope-reorder`` in ``addopts``: by default
pytest-xdist sorts files by their number of tests, which sends a file of few long tests last); a
file of minutes is marked ``early`` (``pytestmark``) so that it starts first instead of ending the
run alone on one worker while the other waits.

Environment variables and ``NEGMINE_CACHE_DIR`` set by a test are per process, each worker's free
ports come from its own range (``tests/helpers/ddp.py``: ``free_port``), and inductor's and Triton's
caches are written atomically (shared on purpose: a kernel compiled by one worker is loaded by the
other)."""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
import time
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

from tests.helpers.slurm_cluster import RUN_ENV  # noqa: E402
from tests.helpers.teardown_guard import pytest_sessionfinish, pytest_unconfigure  # noqa: E402, F401 (hooks)

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(_share)

TESTS = Path(__file__).resolve().parent

#: The quick subset (``-m quick``), paths under tests/: fast in-process tests of each package.
QUICK_FILES = (
    # pretrain
    "pretrain/config/test_config.py",  # the config schema, overrides and validation
    "docs/test_config_docs.py",  # the generated configuration reference
    "pretrain/model/test_model.py",
    "pretrain/engine/test_checkpoint.py",
    "pretrain/engine/test_schedules.py",
    "pretrain/engine/test_queue.py",
    "pretrain/engine/test_knn.py",
    "pretrain/runtime/test_threads.py",
    "pretrain/losses/test_losses.py",
    "pretrain/losses/test_multiview_losses.py",
    "pretrain/losses/test_queue_layout_loss.py",
    "pretrain/losses/test_reweighted_losses.py",
    "pretrain/losses/test_ring.py",
    "pretrain/losses/test_cider_loss.py",
    # negatives
    "negatives/test_negatives.py",  # every strategy in a training step
    "negatives/ocsvm/test_ocsvm.py",
    "negatives/test_mochi.py",
    "negatives/test_outliers.py",
    # linear_eval
    "linear_eval/test_metrics.py",
    "linear_eval/test_stats.py",
    "linear_eval/test_table.py",
    "linear_eval/test_select.py",
    # slurm: time formats and the checks before submitting
    "slurm/test_slurm.py",
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
    if not hasattr(config, "workerinput") and "PYTEST_CURRENT_TEST" not in os.environ:
        # the top-level pytest of a run (not an xdist worker, not a pytest started by a test): it
        # names the run, which its workers inherit, and owns what the run starts outside itself
        os.environ[RUN_ENV] = f"{os.getpid()}-{time.time_ns()}"
        config.pluginmanager.register(RunOwner(), "negmine_run_owner")
    config.addinivalue_line(
        "markers", "early: a test of minutes, started first so that it does not end the run alone"
    )


class RunOwner:
    """The top-level pytest process's end of session: stop what this run started outside the
    test processes (the local SLURM cluster), after every worker has exited."""

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from tests.helpers.slurm_cluster import stop_started_by_run

        stop_started_by_run()


@pytest.hookimpl(tryfirst=True)  # before xdist's own (one per core), also when loaded by -p
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """The worker count for ``-n auto`` (pyproject.toml's ``addopts``), pytest-xdist's documented
    hook: ``$NEGMINE_TEST_WORKERS``, else one per core; 0 (one process, no workers) for a run of
    named files or tests (``path.py``, ``path::test``: run them with ``-n 2`` to spread them), a
    collection only, a pytest started inside a test, or a single core."""
    nested = "PYTEST_CURRENT_TEST" in os.environ or "PYTEST_XDIST_WORKER" in os.environ
    named = [a for a in config.args if "::" in str(a) or not Path(str(a)).is_dir()]
    if nested or named or config.option.collectonly:  # workers' start-up (~10 s) would not pay
        return 0
    workers = default_workers()
    return workers if workers > 1 else 0


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.get_closest_marker("early") is None)  # stable: early first
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
    run and triton (``tests/helpers/triton_launches.py``): ``None`` (the installed triton) or an
    older triton's folder -> the worker's JSON (launches, warnings, PTX) or its error output."""
    pytest.importorskip("triton", reason="triton comes with torch's CUDA wheels; not installed")
    from tests.helpers.run_once import once
    from tests.helpers.triton_launches import OLDER, launch_all

    for site in OLDER:
        if not Path(site, "triton").is_dir():
            pytest.fail(f"NEGMINE_TRITON_OLDER names {site}, which holds no triton")
    sites = [None, *OLDER]  # once per run: the files that use it may run on different workers
    pairs = once("triton_launches", tmp_path_factory, lambda d: list(launch_all(sites, d).items()))
    return dict(pairs)


@pytest.fixture
def on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Train on the GPU in this test (and the processes it starts): ``NEGMINE_DEVICE=cuda``."""
    monkeypatch.setenv("NEGMINE_DEVICE", "cuda")
