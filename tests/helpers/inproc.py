"""Run a command-line ``main`` in this process, as a test would run ``python -m ...``.

A CLI run in a subprocess spends ~4 s of a core importing torch before its first line (2-core
CI); a test that only reads the exit status, the output and the files proves the same with
``main(argv)`` here. What such a run changes in the process is put back afterwards (torch's thread
count and deterministic mode, the RNGs of torch, numpy and random, the environment, the working
directory), so the next test in this worker starts as it would have. Tests that need a process of
their own keep one: a signal to the run, a hang to time out, several ranks, a fresh interpreter's
imports (plugins, sys.path), a resume that must start from nothing but the checkpoint.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import subprocess
from collections.abc import Callable

import numpy
import torch


@contextlib.contextmanager
def isolated() -> object:
    """Put back what a training or evaluation run sets process-wide."""
    threads, interop = torch.get_num_threads(), torch.get_num_interop_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    cudnn = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    rng, env, cwd = torch.get_rng_state(), dict(os.environ), os.getcwd()
    np_rng, py_rng = numpy.random.get_state(), random.getstate()
    try:
        yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn
        torch.set_rng_state(rng)
        numpy.random.set_state(np_rng)
        random.setstate(py_rng)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        assert torch.get_num_interop_threads() == interop


def run(main: Callable[[list[str]], int | None], argv: list[str]) -> subprocess.CompletedProcess:
    """``main(argv)`` with stdout and stderr captured: its status (a ``SystemExit``'s code too),
    output and errors, as ``subprocess.run(..., capture_output=True, text=True)`` returns them.
    An exception that escapes ``main`` fails the test with its traceback (a subprocess would
    print it and exit 1)."""
    out, err = io.StringIO(), io.StringIO()
    with isolated(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) or e.code is None else 1
            if isinstance(e.code, str):
                print(e.code, file=err)
    return subprocess.CompletedProcess(argv, status or 0, out.getvalue(), err.getvalue())


def pretrain(*argv: str) -> subprocess.CompletedProcess:
    """``python -m pretrain ARGV`` in this process."""
    from pretrain.__main__ import main

    return run(main, list(argv))


def linear_eval(*argv: str) -> subprocess.CompletedProcess:
    """``python -m linear_eval ARGV`` in this process."""
    from linear_eval.__main__ import main

    return run(main, list(argv))


def pretrain_from(args: list[str], cwd: os.PathLike) -> subprocess.CompletedProcess:
    """``python -m pretrain ARGS`` from the working directory ``cwd``, in this process."""
    with isolated():  # puts the working directory back
        os.chdir(cwd)
        return pretrain(*args)


def error_line(stderr: str) -> str:
    """The one ``error: ...`` line of a CLI's stderr, without its prefix."""
    [line] = [s for s in stderr.splitlines() if s.startswith("error: ")]
    return line.removeprefix("error: ")
