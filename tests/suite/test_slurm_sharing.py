"""The local SLURM cluster is shared by a test run's processes without depending on how pytest-xdist
distributes the tests (tests/helpers/slurm_cluster.py): one owner stops it, a stop while another
process holds a lease is refused with an error naming the cluster, and a wait fails within seconds
of the controller going away, with the daemons' logs. No SLURM is needed: the state directory is a
temporary one and the controller's answer is a stand-in command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT, TESTS

HOLD = """
import sys
from tests.helpers import slurm_cluster
slurm_cluster._result = {"SLURM_CONF": "unused"}  # as after ensure_cluster() in this process
slurm_cluster.ensure_cluster()
print("holding", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""

STOP = """
from tests.helpers import slurm_cluster
try:
    slurm_cluster.stop_cluster()
except slurm_cluster.ClusterInUse as exc:
    print(exc)
    raise SystemExit(3)
print("stopped")
"""


def python(code: str, state: Path, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "NEGMINE_SLURM_DIR": str(state), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code], env=env, text=True,
                            stdout=subprocess.PIPE, **kwargs)  # fmt: skip


def test_a_stop_while_another_process_holds_a_lease_is_refused_naming_the_cluster(tmp_path):
    state = tmp_path / "slurm"
    (state / "owner.json").parent.mkdir(parents=True)
    (state / "owner.json").write_text(json.dumps({"run": "r", "started": True}))
    holder = python(HOLD, state, stdin=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "holding"
        stop = python(STOP, state)
        out, _ = stop.communicate(timeout=60)
        assert stop.returncode == 3, out
        assert "local SLURM cluster" in out and str(state) in out and "lease" in out, out
        assert (state / "owner.json").exists()  # nothing was stopped
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    stop = python(STOP, state)  # the holder has exited: its lease is gone
    out, _ = stop.communicate(timeout=120)
    assert stop.returncode == 0 and "stopped" in out, out
    assert not (state / "owner.json").exists()


@pytest.mark.parametrize("started, run, stops", [(True, "this", True), (False, "this", False),
                                                 (True, "another", False)])  # fmt: skip
def test_the_run_stops_only_a_cluster_it_started(tmp_path, started, run, stops):
    """A cluster that was up before the run (.ci/run, a shell) or that another run started is
    left running."""
    state = tmp_path / "slurm"
    state.mkdir()
    (state / "owner.json").write_text(json.dumps({"run": run, "started": started}))
    code = "from tests.helpers import slurm_cluster; slurm_cluster.stop_started_by_run()"
    env = {**os.environ, "NEGMINE_SLURM_DIR": str(state), "PYTHONPATH": str(ROOT),
           "NEGMINE_TEST_RUN": "this"}  # fmt: skip
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    assert (state / "owner.json").exists() != stops


def test_a_wait_fails_soon_after_the_controller_goes_away_with_its_log(tmp_path, monkeypatch):
    from tests.helpers.slurm_cluster import Watch

    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "slurmctld.log").write_text("error: the last words of slurmctld\n")
    monkeypatch.setenv("NEGMINE_SLURM_DIR", str(tmp_path))
    watch = Watch({"SLURM_CONF": "/x/slurm.conf"}, lost_after_s=1.0, probe=("false",))
    start = time.monotonic()
    with pytest.raises(AssertionError) as err:
        while time.monotonic() - start < 30:
            assert watch.check() == ""
            time.sleep(0.1)
    assert time.monotonic() - start < 5
    message = str(err.value)
    assert "local SLURM controller (SLURM_CONF=/x/slurm.conf) has not answered for 1 s" in message
    assert "the last words of slurmctld" in message


def test_a_wait_goes_on_while_the_controller_answers_again(tmp_path, monkeypatch):
    from tests.helpers.slurm_cluster import Watch

    monkeypatch.setenv("NEGMINE_SLURM_DIR", str(tmp_path))
    flag = tmp_path / "up"
    probe = ("bash", "-c", f"[[ -e {flag} ]] && echo '7 RUNNING'")
    watch = Watch({}, lost_after_s=0.5, probe=probe)
    assert watch.check() == ""  # failing, within the grace
    flag.touch()
    time.sleep(0.6)
    assert watch.check() == "7 RUNNING\n"  # answered: the failure clock starts again
    flag.unlink()
    assert watch.check() == ""


@pytest.mark.parametrize("value", [None, "0", "yes"])
def test_without_the_opt_in_nothing_is_tried_and_the_reason_names_it(tmp_path, value):
    """A plain ``python -m pytest`` (root on Debian included) installs and starts nothing: only
    ``NEGMINE_SLURM=1`` lets ``ensure_cluster`` try; without it the answer names the variable."""
    code = (
        "from tests.helpers import slurm_cluster\n"
        "def tried(): raise SystemExit('ensure_cluster tried to bring SLURM up')\n"
        "slurm_cluster._up_for_run = tried\n"
        "print(slurm_cluster.ensure_cluster())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NEGMINE_SLURM"}
    env.update({"NEGMINE_SLURM_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)})
    if value is not None:
        env["NEGMINE_SLURM"] = value
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        "the real-SLURM tests are opt-in: set NEGMINE_SLURM=1 to run them (as root on Debian they "
        "install SLURM and munge with apt-get and start their daemons; .ci/run sets it)"
    )
    assert list(tmp_path.iterdir()) == []  # no state, no lock: nothing was started


def test_a_real_slurm_test_is_skipped_without_the_opt_in_naming_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NEGMINE_SLURM"}
    env["NEGMINE_SLURM_DIR"] = str(tmp_path)
    test = "tests/slurm/test_slurm.py::test_training_job_runs_to_completion"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-n", "0", "-p", "no:cacheprovider", test],
        cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    assert "1 skipped" in out.stdout, out.stdout[-3000:]
    assert "no local SLURM: the real-SLURM tests are opt-in: set NEGMINE_SLURM=1" in out.stdout
