"""A pytest plugin: the test session's verdict is not lost to a hang in interpreter teardown.

Why: a CI run once printed ``1243 passed, 15 skipped in 446.84s`` and then its pytest
process did not exit for ~80 minutes, until the CI limit killed the job (slurmctld, which
``.ci/run`` stops only after pytest returns, was still purging job records 10 minutes later). Five
local runs of the same suite, with the same ``CI=true`` and a cold inductor cache, exited at once,
so the cause is not known. A hang after the summary happens in Python's shutdown: joining
non-daemon threads (``concurrent.futures`` workers among them), ``atexit`` handlers (inductor's
compile-worker pool, multiprocessing's finalizers), or a C++ destructor.

What it does: when the session ends, a daemon thread waits ``NEGMINE_TEARDOWN_GRACE_S`` seconds
(default 120; a clean exit takes a few). If the process is still alive then, it prints every
thread's Python stack and this process's live children to the original stderr, kills those
children and their descendants (one that inherited the CI's stdout would keep its pipe open after
we leave), and leaves with the session's exit status, which is the verdict the tests gave. If
the hang holds the GIL, so that no Python thread can run, ``faulthandler``'s C watchdog dumps the
stacks at twice the grace and exits with status 1. Either way the next person sees where it
hung, instead of a timeout.

``tests/conftest.py`` imports these hooks; ``-p teardown_guard`` loads them on their own.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time

import pytest

_status = 0


def grace_s() -> float:
    return float(os.environ.get("NEGMINE_TEARDOWN_GRACE_S", "120"))


def live_children(pid: int) -> list[str]:
    """``pid command`` of each live child process of ``pid`` (read from /proc; [] elsewhere)."""
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(pid) and fields[0] != "Z":
            out.append(f"{entry} {cmd[:200]}")
    return out


def descendants(pid: int) -> list[int]:
    """PIDs of the live descendants of ``pid``, children first (read from /proc; [] elsewhere)."""
    found, frontier = [], [pid]
    while frontier:
        kids = [int(line.split(" ", 1)[0]) for p in frontier for line in live_children(p)]
        found += kids
        frontier = kids
    return found


def _kill_descendants(out) -> None:
    """SIGKILL this process's descendants: one that inherited CI's stdout keeps its pipe open."""
    for pid in descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
            out.write(f"[teardown_guard] killed pid {pid}\n")
        except OSError:
            pass


def _watch(out, status: int, grace: float) -> None:
    time.sleep(grace)
    threads = [t.name for t in threading.enumerate() if not t.daemon]
    out.write(
        f"\n[teardown_guard] the test session ended {grace:.0f} s ago with status {status}, but "
        f"this process has not exited.\n[teardown_guard] non-daemon threads: {threads}\n"
        f"[teardown_guard] live children: {live_children(os.getpid()) or 'none'}\n"
        "[teardown_guard] stacks of every thread:\n"
    )
    out.flush()
    faulthandler.dump_traceback(file=out, all_threads=True)
    _kill_descendants(out)
    out.write(f"[teardown_guard] leaving with the session's status {status}\n")
    out.flush()
    os._exit(status)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _status
    _status = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    grace = grace_s()
    if grace <= 0:
        return
    # A duplicate of fd 2: pytest's capture and faulthandler plugins are undone by now, but the
    # copy stays valid whatever closes sys.stderr during shutdown.
    out = os.fdopen(os.dup(sys.__stderr__.fileno()), "w", buffering=1)
    watcher = threading.Thread(
        target=_watch, args=(out, _status, grace), name="teardown_guard", daemon=True
    )
    watcher.start()
    faulthandler.dump_traceback_later(2 * grace, exit=True, file=out)
