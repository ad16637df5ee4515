"""A one-node SLURM cluster on localhost for tests (``slurm/local_cluster.sh``), shared safely.

Not a test module: tests use it like this::

    @pytest.fixture(scope="module")
    def cluster():
        env = slurm_cluster.ensure_cluster()
        if isinstance(env, str):
            pytest.skip(env)
        return env

and then set the returned variables before calling ``sbatch`` or submitit, use a fresh submitit
folder per cluster, and wait through :class:`Watch` (there is no slurmdbd: submitit sees job states
as UNKNOWN, and ``job.result()`` of a job killed before writing its result never returns).

The cluster lives outside every test process, so it has one owner whatever the distribution:

- **one start per run.** ``ensure_cluster`` takes ``owner.lock`` in the state directory; the first
  process of the run (``NEGMINE_TEST_RUN``, set by the top-level pytest) starts the daemons and
  records that in ``owner.json``; later processes of the run (other xdist workers) reuse them. A
  cluster that was already up before the run (``.ci/run``, a developer's shell) is used, never
  stopped.
- **leases.** Every process that got the cluster holds a shared ``flock`` on ``lease`` until it
  exits. :func:`stop_cluster` stops the daemons only if it gets the lock exclusively: while
  another process holds a lease it raises :class:`ClusterInUse`, naming the cluster, instead of
  pulling it from under that process's jobs.
- **the stop.** The top-level pytest process calls :func:`stop_started_by_run` when the session
  ends (``tests/conftest.py``), after every worker has exited.
- **a lost controller fails fast.** :class:`Watch` fails a wait when the controller has not
  answered for ``LOST_AFTER_S`` (60) seconds, with the daemons' logs, instead of polling for the
  whole deadline.

The real-SLURM tests are opt-in: ``ensure_cluster`` tries nothing unless ``NEGMINE_SLURM=1``
(``.ci/run`` sets it), and a test that needs the cluster is skipped with a reason naming the
variable, so a plain ``python -m pytest`` never installs software or starts daemons. With it,
``ensure_cluster`` needs root on Debian (or SLURM and munge already installed); it installs the
packages on first use (about 10-20 s), after which a bring-up takes about a second. The state
directory is ``NEGMINE_SLURM_DIR`` (default ``/tmp/negmine-slurm``).
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from tests.helpers.paths import ROOT

SCRIPT = ROOT / "slurm" / "local_cluster.sh"
UP_TIMEOUT_S = 600  # a cold start installs packages; the script's own waits are shorter
DOWN_TIMEOUT_S = 120

RUN_ENV = "NEGMINE_TEST_RUN"  # this test run's id, set by the top-level pytest process
LOST_AFTER_S = 60.0  # a wait fails once the controller has not answered for this long
OPT_IN_ENV = "NEGMINE_SLURM"  # "1": the real-SLURM tests may install and start SLURM
OPT_IN_REASON = (
    "the real-SLURM tests are opt-in: set NEGMINE_SLURM=1 to run them (as root on Debian they "
    "install SLURM and munge with apt-get and start their daemons; .ci/run sets it)"
)

_result: dict[str, str] | str | None = None
_lease = None  # this process's open lease file (a shared flock), while it uses the cluster


class ClusterInUse(RuntimeError):
    """A stop of the shared cluster while another process holds a lease on it."""


def state_dir() -> Path:
    return Path(os.environ.get("NEGMINE_SLURM_DIR", "/tmp/negmine-slurm")).resolve()


def cluster_log(lines: int = 20) -> str:
    """The last lines of the daemons' logs in the state directory."""
    parts = []
    for name in ("slurmctld", "slurmd", "munged"):
        for path in (state_dir() / "log" / f"{name}.log", state_dir() / "log" / f"{name}.out"):
            if path.is_file() and path.stat().st_size:
                parts.append(f"--- {path} ---\n{_tail(path.read_text(errors='replace'), lines)}")
                break
    return "\n".join(parts) or f"(no daemon logs under {state_dir() / 'log'})"


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


def _owner_file() -> Path:
    return state_dir() / "owner.json"


def _take_lease() -> None:
    global _lease
    if _lease is None:
        state_dir().mkdir(parents=True, exist_ok=True)
        _lease = open(state_dir() / "lease", "a")  # noqa: SIM115 (held until the process exits)
        fcntl.flock(_lease, fcntl.LOCK_SH)


def _release_lease() -> None:
    global _lease
    if _lease is not None:
        _lease.close()  # drops the flock
        _lease = None


def _up_for_run() -> dict[str, str] | str:
    """Under ``owner.lock``: this run's cluster, started now by this process if nobody has."""
    run = os.environ.get(RUN_ENV, f"pid-{os.getpid()}")
    state_dir().mkdir(parents=True, exist_ok=True)
    with open(state_dir() / "owner.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        owner = _read_owner()
        if owner.get("run") == run and _answers(owner.get("env", {})):
            return dict(owner["env"])
        was_up = _answers({"SLURM_CONF": str(state_dir() / "etc" / "slurm.conf")})
        env = _bring_up()
        if isinstance(env, dict):
            record = {"run": run, "started": not was_up, "pid": os.getpid(), "env": env}
            _owner_file().write_text(json.dumps(record))
        return env


def _read_owner() -> dict:
    try:
        return json.loads(_owner_file().read_text())
    except (OSError, ValueError):
        return {}


def _answers(env: dict[str, str]) -> bool:
    """Whether the controller named by ``env``'s SLURM_CONF answers a ping."""
    conf = env.get("SLURM_CONF")
    if not conf or not Path(conf).is_file() or shutil.which("scontrol") is None:
        return False
    try:
        out = subprocess.run(
            ["scontrol", "ping"],
            capture_output=True,
            text=True,
            timeout=10,
            env={**os.environ, **env},
        )
    except subprocess.TimeoutExpired:
        return False
    return out.returncode == 0 and "is UP" in out.stdout


def ensure_cluster() -> dict[str, str] | str:
    """The cluster for this process (started once per run): the variables to export
    (``SLURM_CONF``), or why not. The process holds a lease on it until it exits."""
    global _result
    if _result is None:
        if os.environ.get(OPT_IN_ENV) != "1":
            _result = OPT_IN_REASON
        else:
            _result = _up_for_run()
    if isinstance(_result, str):
        return _result
    _take_lease()
    return dict(_result)


def stop_cluster() -> None:
    """Stop the daemons (cancelling any jobs), unless another process holds a lease on them."""
    global _result
    _release_lease()
    _result = None
    if not state_dir().is_dir():
        return
    with open(state_dir() / "lease", "a") as lease:
        try:
            fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ClusterInUse(
                f"the local SLURM cluster ({state_dir()}) is still in use by another test process "
                "(it holds a lease on it): not stopping it. Its owner, the top-level pytest "
                "process, stops it when the session ends (tests/helpers/slurm_cluster.py)"
            ) from None
        try:
            _run("down", DOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        _owner_file().unlink(missing_ok=True)


def stop_started_by_run() -> None:
    """At the end of the top-level session: stop the cluster if this run started it."""
    owner = _read_owner()
    if owner.get("started") and owner.get("run") == os.environ.get(RUN_ENV):
        stop_cluster()


class Watch:
    """A wait on the cluster that fails fast when the controller goes away.

    Call :meth:`check` in the wait loop: it runs ``probe`` (``squeue``) and returns its output.
    Once the probe has failed for ``lost_after_s`` seconds in a row it raises AssertionError naming
    the controller, with the probe's error and the daemons' logs."""

    def __init__(
        self,
        env: dict[str, str],
        lost_after_s: float = LOST_AFTER_S,
        probe: tuple[str, ...] = ("squeue", "-h", "-o", "%i %T"),
    ) -> None:
        self.env, self.lost_after_s, self.probe = env, lost_after_s, list(probe)
        self.failing_since: float | None = None

    def check(self) -> str:
        try:
            out = subprocess.run(
                self.probe, capture_output=True, text=True, env=self.env, timeout=30
            )
            ok, why = out.returncode == 0, (out.stderr or out.stdout).strip()
        except subprocess.TimeoutExpired:
            ok, why, out = False, f"{self.probe[0]} did not answer in 30 s", None
        if ok:
            self.failing_since = None
            return out.stdout
        now = time.monotonic()
        self.failing_since = self.failing_since or now
        if now - self.failing_since >= self.lost_after_s:
            raise AssertionError(
                f"the local SLURM controller (SLURM_CONF={self.env.get('SLURM_CONF')}) has not "
                f"answered for {self.lost_after_s:.0f} s ({why}); was the shared cluster "
                f"stopped by another test process?\n{cluster_log()}"
            )
        return ""
