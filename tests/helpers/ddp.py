"""Processes of several ranks from a test: a free rendezvous port per xdist worker, an
environment without a launcher's variables, and a worker run whose whole group a timeout ends."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess

import pytest

from tests.helpers.paths import ROOT


def free_port() -> int:
    """A port free now for a rendezvous. Under pytest-xdist each worker draws from its own block
    of 500 below Linux's ephemeral range (32768-), so two workers never hand out the same port
    and no OS-assigned client port takes it in between; otherwise one the OS assigns."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        base = 20000 + 500 * (int(worker[2:]) % 25)
        for port in random.sample(range(base, base + 500), 500):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without launcher variables (pytest may itself run inside a job)."""
    launcher = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in launcher and not k.startswith("SLURM")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT), **extra)
    return env


def run_worker(*args: str, timeout: float = 120) -> None:
    """Run ``args`` in a new session; on timeout kill the whole group (torchrun and its ranks)."""
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{args[1:3]} ran past {timeout} s:\n{out}\n{err}")
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{out}\n{err}"
