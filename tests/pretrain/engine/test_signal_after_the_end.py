"""A stop signal that reaches ``python -m pretrain`` after its run ended (the "run complete" line
printed, then the provenance, the loaders and the process group closed) leaves the exit status
the run's: 0, not 143 (SIGTERM) or 130 (Ctrl-C) for a finished run. The signal is sent by the
process itself at a fixed point of its way out, so the test does not race it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.runs import SUBSET_RUN

SMALL = [*SUBSET_RUN, "train.epochs=1"]

# python -m pretrain ARGS, with a signal sent to itself at WHERE (then a pause for it to arrive)
SCRIPT = """
import os, runpy, signal, sys, time
where, name = sys.argv[1], sys.argv[2]
module = __import__("pretrain.runtime." + where.split(".")[0], fromlist=["x"])
real = getattr(module, where.split(".")[1])

def signalled(*args, **kwargs):
    print("sending " + name + " at " + where, flush=True)
    os.kill(os.getpid(), getattr(signal, name))
    time.sleep(0.5)
    return real(*args, **kwargs)

setattr(module, where.split(".")[1], signalled)
sys.argv = ["pretrain", *sys.argv[3:]]
runpy.run_module("pretrain", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(
    ("where", "sig"),
    [("provenance.finish", "SIGTERM"),  # after "run complete", while the run closes
     ("dist.finish", "SIGINT")],  # after the run returned its status, as the process leaves
)  # fmt: skip
def test_a_stop_signal_after_run_complete_keeps_the_status_0(tmp_path, where, sig):
    args = ["--cfg", "digits_moco.yaml", f"out_dir={tmp_path / 'run'}", *SMALL]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, where, sig, *args], capture_output=True,
                          text=True, timeout=300, env=env, cwd=ROOT)  # fmt: skip
    out = done.stdout
    assert "run complete (1 epoch)" in out and f"sending {sig} at {where}" in out, out + done.stderr
    assert out.index("run complete") < out.index("sending")
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
