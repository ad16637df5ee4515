"""Tests for more mutations a mutation audit found surviving (engine, data, records): each fails
when its mutation is applied (the docstring names it), against a reference of its own: the
components called in the documented order, an uninterrupted run, the kernel's clock, numpy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from pretrain import config
from pretrain.engine import loop
from pretrain.runtime import checkpoint_io, provenance
from tests.helpers.paths import ROOT
from tests.helpers.runs import SUBSET_RUN


def test_outliers_are_made_before_imix_mixes_the_queries(tmp_path, monkeypatch):
    """E03 (the loss's ``transform_batch`` before the strategy's): the encoder must see the
    batch with the strategy's outliers in it, then i-Mix's mixing of those queries, as the two
    hooks give when called in that order on the same RNG state."""
    from negmine_core.step import Batch
    from pretrain.engine import step

    cfg = config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *SUBSET_RUN, "loss.name=imix",
                                           "negatives.name=outliers",
                                           "negatives.kwargs={ratio: 0.5}"])  # fmt: skip
    run = loop.setup(cfg)
    x1, x2, y, _, *rows = next(iter(run.data.train_loader))
    batch = Batch.make(x1, x2, y, rows)
    seen = []

    def embed(b):
        seen.append(b.x1.clone())
        raise InterruptedError  # the images are all this test needs

    monkeypatch.setattr(run.moco, "embed", embed)
    rng = torch.get_rng_state()
    with pytest.raises(InterruptedError):
        loop.train_step(run, batch, 1.0)

    torch.set_rng_state(rng)
    b = step.photometric(run, batch)
    outliers = run.strategy.transform_batch(b)
    want = run.loss_fn.transform_batch(outliers).x1
    assert not torch.equal(want, outliers.x1)  # i-Mix mixed them
    assert torch.equal(seen[0], want)
    run.close()


def test_a_stop_signal_at_an_epochs_last_step_stops_there(tmp_path, monkeypatch):
    """E08 (a stop signal during an epoch's last step ignored): the run must save at that step
    and stop (not evaluate and start the next epoch), and its resume must end where an
    uninterrupted run ends."""
    from tests.helpers.inproc import pretrain
    from tests.helpers.runs import tensors

    args = ["--cfg", "digits_moco.yaml", *SUBSET_RUN, "train.epochs=2", "eval.knn_every=1"]
    whole = pretrain(*args, f"out_dir={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr[-2000:]
    steps = checkpoint_io.load(tmp_path / "whole" / "checkpoints" / "last.pt")["global_step"] // 2

    real = loop.train_step

    def signalled_at_the_last_step(run, batch, epoch):
        if run.state.global_step == steps - 1:  # the step in flight is epoch 1's last
            os.kill(os.getpid(), signal.SIGTERM)
        return real(run, batch, epoch)

    monkeypatch.setattr(loop, "train_step", signalled_at_the_last_step)
    out = tmp_path / "cut"
    cut = pretrain(*args, f"out_dir={out}")
    assert cut.returncode == 0, cut.stderr[-2000:]
    assert f"SIGTERM: checkpoint saved at epoch 1 step {steps}/{steps}" in cut.stdout, cut.stdout
    assert checkpoint_io.load(out / "checkpoints" / "last.pt")["global_step"] == steps
    monkeypatch.setattr(loop, "train_step", real)
    resumed = pretrain(*args, f"out_dir={out}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a = tensors(checkpoint_io.load(tmp_path / "whole" / "checkpoints" / "last.pt"))
    b = tensors(checkpoint_io.load(out / "checkpoints" / "last.pt"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_process_start_is_the_kernels(tmp_path):
    """V01 (the segment's start taken at the call of ``provenance.start``, or from the wrong
    field of ``/proc/self/stat``): a process that sleeps 3 s before starting its record must
    get a start between its spawn and its first line (the kernel's clock ticks and whole-second
    boot time allow 1.5 s), not the moment it asked."""
    if not os.path.exists("/proc/self/stat"):
        pytest.skip("no /proc here: the start is the time of the call by design")
    script = (
        "import sys, time; t = time.time(); time.sleep(3.0)\n"
        "import torch; from pretrain.runtime import provenance\n"
        "p = provenance.start(sys.argv[1], torch.device('cpu'))\n"
        "print(t, p.started, p.segment['start'])"
    )
    before = time.time()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                          text=True, check=True, env=env)  # fmt: skip
    first_line, started, stamp = done.stdout.split()
    assert before - 1.5 <= float(started) <= float(first_line) + 1.5, done.stdout
    assert stamp == provenance.utc(float(started))
    assert json.loads((tmp_path / provenance.FILE).read_text())["start"] == stamp


def test_a_requeued_runs_row_keeps_its_recipe(tmp_path, monkeypatch):
    """V04 (the recipe read from the last segment's command): a requeued run's later segments
    are started by submitit, whose command names no ``--cfg``; the row must stay, named after
    the first segment's config."""
    import shutil

    from tests.helpers.results_runs import fake_run, gen_results, rows

    runs, page, readme = tmp_path / "runs", tmp_path / "results.md", tmp_path / "README.md"
    shutil.copy(gen_results.README, readme)
    for name, value in (("RUNS", runs), ("PAGE", page), ("README", readme)):
        monkeypatch.setattr(gen_results, name, value)
    fake_run(runs / "digits_moco_s0", 0, 90.0, 100.0)
    prov_file = runs / "digits_moco_s0" / "provenance.json"
    prov = json.loads(prov_file.read_text())
    requeued = {**prov["segments"][0], "command": "python -m submitit.core._submit /jobs/logs"}
    prov_file.write_text(json.dumps({**prov, "segments": [*prov["segments"], requeued]}))
    assert gen_results.main([]) == 0
    assert [r for r in rows(page.read_text()) if r[0] == "`digits_moco.yaml`" and r[3] == "0"]


@pytest.mark.parametrize("mask_bits", ["0110", "0101", "1001"])
def test_sample_mask_draws_the_rth_true_entry_at_the_edges(monkeypatch, mask_bits):
    """O4 (``searchsorted(..., right=False)``): a draw u c that is a whole number r (0 included,
    which torch's ``rand`` can return) must give the (r+1)-th True entry, never the entry before
    it (with ``right=False``: a False one, or the r-th). Reference: numpy's ``flatnonzero``."""
    from negatives.mioc import sample_mask

    mask = torch.tensor([b == "1" for b in mask_bits])
    c = int(mask.sum())
    u = torch.tensor([0.0, 0.5, 1.0 / c, 1 - 2**-24], dtype=torch.float32)
    monkeypatch.setattr(torch, "rand", lambda n, device=None: u[:n].clone())
    got, count = sample_mask(mask, torch.zeros(len(u), dtype=torch.long))
    want = np.flatnonzero(mask.numpy())[np.floor(u.numpy().astype(np.float64) * c).astype(int)]
    assert float(count) == c and got.tolist() == want.tolist()
