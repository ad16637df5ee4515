"""The epoch's checkpoint is written before its evaluation: a run killed with
SIGKILL (no handler, no failure path that could write the checkpoint itself) while epoch N's kNN
monitor runs leaves ``last.pt`` holding epoch N, and the rerun evaluates epoch N and goes on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from pretrain.runtime import checkpoint_io
from tests.helpers import inproc
from tests.helpers.paths import ROOT
from tests.helpers.runs import TINY, lines

# the kNN monitor's extraction announces itself, then hangs until killed
HANG_IN_KNN = """
import sys, time
from pathlib import Path
from pretrain.engine import monitor
marker = Path(sys.argv[1])
def hang(*args, **kwargs):
    marker.write_text("in knn")
    time.sleep(600)
monitor.extract = hang
from pretrain.__main__ import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_during_the_knn_monitor_leaves_the_epochs_checkpoint(tmp_path):
    out, marker = tmp_path / "run", tmp_path / "in_knn"
    args = ["--cfg", "digits_moco.yaml", f"out_dir={out}", *TINY, "train.epochs=2",
            "train.max_steps=0"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", HANG_IN_KNN, str(marker), *args], env=env,
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the kNN monitor never started"
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    state = checkpoint_io.load(out / "checkpoints" / "last.pt", map_location="cpu")
    assert state["epoch"] == 1 and state["step_in_epoch"] == 0  # epoch 1 done, kNN not logged
    assert state["epoch_record"]["epoch"] == 1
    assert not lines(out, "epoch")
    done = inproc.pretrain(*args)  # the rerun, in this process (tests/helpers/inproc.py)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [r["epoch"] for r in lines(out, "epoch")] == [1, 2]
    assert all("knn_top1" in r for r in lines(out, "epoch"))
