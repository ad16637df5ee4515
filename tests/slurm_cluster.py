"""Bring a one-node SLURM cluster up on localhost for tests (``slurm/local_cluster.sh``).

Not a test module: tests use it like this::

    @pytest.fixture(scope="session")
    def slurm_env():
        env = slurm_cluster.ensure_cluster()
        if isinstance(env, str):
            pytest.skip(env)
        yield env
        slurm_cluster.teardown_cluster()

and then set the returned variables (``monkeypatch.setenv(k, v)`` for each) before calling
``sbatch`` or submitit, use a fresh submitit folder per cluster, and give every wait its own
deadline (there is no slurmdbd: submitit sees job states as UNKNOWN, and ``job.result()`` of a job
killed before writing its result never returns).

``ensure_cluster`` needs root on Debian (or SLURM and munge already installed); it installs the
packages on first use (about 10-20 s), after which a bring-up takes about a second. The state
directory is ``NEGMINE_SLURM_DIR`` (default ``/tmp/negmine-slurm``). Set ``NEGMINE_SLURM=0`` to skip
SLURM tests without trying.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "slurm" / "local_cluster.sh"
UP_TIMEOUT_S = 600  # a cold start installs packages; the script's own waits are shorter
DOWN_TIMEOUT_S = 120

_result: dict[str, str] | str | None = None


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _run(action: str, timeout: float) -> subprocess.CompletedProcess[str]:
    # stdin from /dev/null, output captured: the daemons the script starts keep none of these open.
    return subprocess.run(
        ["bash", str(SCRIPT), action],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def parse_exports(stdout: str) -> dict[str, str]:
    """The ``export NAME=VALUE`` lines of the script's stdout, as a dict."""
    env = {}
    for line in stdout.splitlines():
        if not line.startswith("export "):
            continue
        name, sep, value = line[len("export ") :].partition("=")
        if sep and name.isidentifier():
            words = shlex.split(value)
            env[name] = words[0] if words else ""
    return env


def _bring_up() -> dict[str, str] | str:
    if os.environ.get("NEGMINE_SLURM", "1") == "0":
        return "local SLURM cluster disabled by NEGMINE_SLURM=0"
    if os.name != "posix" or shutil.which("bash") is None:
        return "local SLURM cluster needs bash on Linux"
    if not SCRIPT.is_file():
        return f"missing {SCRIPT}"
    if os.geteuid() != 0:
        return f"local SLURM cluster needs root (uid is {os.geteuid()})"
    have_slurm = all(shutil.which(b) for b in ("slurmctld", "slurmd", "sbatch", "srun", "munged"))
    if not have_slurm and shutil.which("apt-get") is None:
        return "SLURM is not installed and there is no apt-get to install it (not Debian?)"
    try:
        proc = _run("up", UP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        out = "".join(
            part.decode(errors="replace") if isinstance(part, bytes) else part
            for part in (exc.stderr, exc.stdout)
            if part
        )
        return f"`local_cluster.sh up` did not finish in {UP_TIMEOUT_S} s:\n{_tail(out)}"
    env = parse_exports(proc.stdout)
    if proc.returncode != 0 or "SLURM_CONF" not in env:
        return (
            f"`local_cluster.sh up` failed (exit {proc.returncode}):\n"
            f"{_tail(proc.stderr + proc.stdout)}"
        )
    return env


def ensure_cluster() -> dict[str, str] | str:
    """Start the cluster once per process: the variables to export (``SLURM_CONF``), or why not."""
    global _result
    if _result is None:
        _result = _bring_up()
    return dict(_result) if isinstance(_result, dict) else _result


def teardown_cluster() -> None:
    """Stop the daemons (cancelling any jobs); the next ``ensure_cluster`` starts them again."""
    global _result
    if _result is None:
        return
    was_up = isinstance(_result, dict)
    _result = None
    if was_up:
        try:
            _run("down", DOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
