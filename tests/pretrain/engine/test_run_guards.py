"""Runs you can trust: no epoch lost to a failed evaluation, no hang after an error, one
live run per run folder, a failed checkpoint write that says what survived, and the refusals of a
run that must not start (exit 2, nothing written)."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pretrain import config
from pretrain.engine import loop
from pretrain.runtime import checkpoint_io, runlock
from pretrain.runtime.checkpoint_io import CheckpointError
from pretrain.testing.fakedata import random_images, write_png
from tests.helpers import inproc, runs
from tests.helpers.paths import ROOT
from tests.helpers.runs import SUBSET_RUN

SMALL = [  # 64 training images of 16 px in 2 classes: 2 steps an epoch, seconds a run
    "data.name=imagefolder",
    "data.image_size=16",
    "data.eval_resize=16",
    "model.width=8",
    "model.bn_splits=2",
    "train.batch_size=32",
    "moco.queue_size=32",
    "train.deterministic=true",
    "train.progress_bar=false",
    "train.threads=1",
    "train.log_every=1",
    "eval.knn_every=1",
    "eval.knn_k=10",
    "data.num_workers=0",
]


def image_folder(root: Path, bad_test: bool = False, bad_train: bool = False) -> Path:
    images = random_images(80, 32, 0)
    for i in range(64):
        write_png(root / "train" / f"c{i % 2}" / f"{i:02d}.png", images[i])
    for i in range(16):
        write_png(root / "test" / f"c{i % 2}" / f"{i:02d}.png", images[64 + i])
    if bad_test:  # a text file with an image's name, as found in a real copy of CIFAR-10
        (root / "test" / "c0" / "zz_bad.jpg").write_text("not an image\n")
    if bad_train:
        (root / "train" / "c1" / "05_bad.jpg").write_text("not an image\n")
    return root


def pretrain(
    out: Path, data: Path, *extra: str, wait: bool = True, process: bool = False,
    timeout: float = 240,
) -> subprocess.Popen | subprocess.CompletedProcess:  # fmt: skip
    """A CLI run on the small image folder: to its end in this process
    (``tests/helpers/inproc.py``), or as a process of its own, to its end within ``timeout``
    (``process=True``: a hang fails the test instead of blocking it) or started (``wait=False``) for
    a test that signals it."""
    args = ["--cfg", "digits_moco.yaml", f"out_dir={out}", f"data.root={data}", *SMALL, *extra]
    if wait and not process:
        return inproc.pretrain(*args)
    cmd = [sys.executable, "-m", "pretrain", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    if wait:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=ROOT)  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)  # fmt: skip


def records(run: Path, kind: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def last_state(run: Path) -> dict:
    return torch.load(run / "checkpoints" / "last.pt", weights_only=True)


def flat(obj: object, prefix: str = "") -> dict[str, torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    if isinstance(obj, dict):
        return {k: v for key, val in obj.items() for k, v in flat(val, f"{prefix}/{key}").items()}
    if isinstance(obj, (list, tuple)):
        return {k: v for i, val in enumerate(obj) for k, v in flat(val, f"{prefix}/{i}").items()}
    return {}


def tensorboard_files(run: Path) -> list[Path]:
    return sorted((run / "tensorboard").glob("events.*")) if (run / "tensorboard").exists() else []


# item 3 --------------------------------------------------------------------------------------


def test_failed_evaluation_keeps_the_epoch_ends_the_run_and_the_rerun_evaluates_it(tmp_path):
    """A bad test image with loader workers: exit 1 within the timeout (it hung, workers alive),
    the epoch's checkpoint already on disk; after the image is removed the rerun evaluates that
    epoch and ends bit-identical to a run that never failed."""
    data = image_folder(tmp_path / "data", bad_test=True)
    run = tmp_path / "run"
    failed = pretrain(run, data, "train.epochs=2", "data.num_workers=1", process=True, timeout=120)
    assert failed.returncode == 1, failed.stderr
    assert "cannot read image" in failed.stderr and "zz_bad.jpg" in failed.stderr
    assert "Traceback" not in failed.stderr
    state = last_state(run)
    assert (state["epoch"], state["step_in_epoch"]) == (1, 0)  # epoch 1 kept, before its kNN
    assert "checkpoint of epoch 1 is saved" in failed.stderr
    assert records(run, "epoch") == []  # its record waits for the evaluation

    (data / "test" / "c0" / "zz_bad.jpg").unlink()
    again = pretrain(run, data, "train.epochs=2", "data.num_workers=1")
    assert again.returncode == 0, again.stderr
    assert "resuming at epoch 2 step 0" in again.stdout
    got = records(run, "epoch")
    assert [r["epoch"] for r in got] == [1, 2] and all("knn_top1" in r for r in got)

    full = tmp_path / "full"
    done = pretrain(full, data, "train.epochs=2", "data.num_workers=1")
    assert done.returncode == 0, done.stderr
    keys = ("model", "queue", "optimizer", "epoch_stats")  # numpy's global RNG is never seeded
    a, b = (flat({k: last_state(r)[k] for k in keys}) for r in (full, run))
    assert torch.equal(last_state(full)["rng"]["torch"], last_state(run)["rng"]["torch"])
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    want = records(full, "epoch")
    for ra, rb in zip(want, got):
        assert (ra["loss"], ra["knn_top1"]) == (rb["loss"], rb["knn_top1"])


def test_failed_evaluation_of_an_epoch_without_a_scheduled_checkpoint_writes_one(tmp_path):
    data = image_folder(tmp_path / "data", bad_test=True)
    run = tmp_path / "run"
    failed = pretrain(run, data, "train.epochs=3", "train.ckpt_every=2")
    assert failed.returncode == 1, failed.stderr
    assert "checkpoint of epoch 1 is saved" in failed.stderr
    state = last_state(run)
    assert (state["epoch"], state["step_in_epoch"]) == (1, 0)
    assert state["epoch_record"]["epoch"] == 1  # the record the rerun logs with its evaluation


def test_bad_training_image_with_workers_ends_the_run(tmp_path):
    data = image_folder(tmp_path / "data", bad_train=True)
    bad = pretrain(tmp_path / "run", data, "train.epochs=1", "data.num_workers=1", process=True,
                   timeout=120)  # fmt: skip
    assert bad.returncode == 1 and "05_bad.jpg" in bad.stderr, bad.stderr


# item 5 --------------------------------------------------------------------------------------


def wait_for_steps(proc: subprocess.Popen, run: Path, steps: int) -> None:
    deadline = time.time() + 120
    while time.time() < deadline:
        m = run / "metrics.jsonl"
        if m.exists() and len(records(run, "step")) >= steps:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the first run did not start")


def test_second_run_on_a_live_run_folder_is_refused_and_a_stale_lock_taken_over(tmp_path):
    data = image_folder(tmp_path / "data")
    run = tmp_path / "run"
    first = pretrain(run, data, "train.epochs=500", "eval.knn_every=0", wait=False)
    try:
        wait_for_steps(first, run, 2)
        tb = tensorboard_files(run)
        second = pretrain(run, data, "train.epochs=500", "eval.knn_every=0")
        assert second.returncode == 2, second.stderr
        assert f"pid {first.pid}" in second.stderr and "in use by another run" in second.stderr
        assert "Traceback" not in second.stderr
        assert tensorboard_files(run) == tb  # the refused run wrote nothing
    finally:
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert "SIGTERM: checkpoint saved" in out
    steps = last_state(run)["global_step"]
    assert [r["global_step"] for r in records(run, "step")] == list(range(1, steps + 1))

    # a run killed without a chance to clean up: its lock file stays, naming a dead process,
    # and a checkpoint write it left half done
    lock = run / ".lock"
    assert lock.is_file()
    lock.write_text("pid 999999 on host elsewhere, started 2026-01-01T00:00:00Z\n")
    stale = run / "checkpoints" / ".last.pt.abc123.tmp"
    stale.write_bytes(b"PK half a checkpoint")
    resumed = pretrain(run, data, f"train.max_steps={steps + 1}", "eval.knn_every=0",
                       "train.epochs=500")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert not stale.exists()
    assert "pid 999999" not in lock.read_text()


def test_lock_is_held_by_one_process_at_a_time(tmp_path):
    """The lock itself, in-process: a second holder is refused with the first's pid and host; a
    released lock is taken again."""
    held = runlock.RunLock(tmp_path)
    held.acquire()
    try:
        probe = subprocess.run(
            [sys.executable, "-c",
             "from pretrain.runtime import runlock; "
             f"runlock.RunLock({str(tmp_path)!r}).acquire()"],
            capture_output=True, text=True, timeout=60, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert probe.returncode != 0
        assert f"pid {os.getpid()} on host {os.uname().nodename}" in probe.stderr, probe.stderr
    finally:
        held.release()
    again = runlock.RunLock(tmp_path)
    again.acquire()
    same_process = runlock.RunLock(tmp_path)  # a second run set up in this process shares it
    same_process.acquire()
    again.release()
    probe = subprocess.run(
        [sys.executable, "-c",
         f"from pretrain.runtime import runlock; runlock.RunLock({str(tmp_path)!r}).acquire()"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert probe.returncode != 0  # still held by same_process
    same_process.release()


# item 6 --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "failure",
    [OSError(errno.ENOSPC, "No space left on device"),
     RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 4352 vs 4246")],
    ids=["ENOSPC", "torch-unexpected-pos"],
)  # fmt: skip
def test_failed_save_names_the_path_the_free_space_and_the_intact_checkpoint(
    tmp_path, monkeypatch, failure
):
    path = tmp_path / "checkpoints" / "last.pt"
    checkpoint_io.save({"epoch": 3}, path)
    before = path.read_bytes()

    def full_disk(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a zip file")
        raise failure

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(CheckpointError) as e:
        checkpoint_io.save({"epoch": 4}, path)
    monkeypatch.undo()
    message = str(e.value)
    assert f"cannot write checkpoint {path}" in message
    free = shutil.disk_usage(path.parent).free / 2**30
    assert f"{free:.1f} GiB free" in message
    assert f"the previous checkpoint {path} is intact" in message
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.pt"]


def test_failed_first_save_says_there_is_no_previous_checkpoint(tmp_path, monkeypatch):
    def full_disk(obj, f, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(CheckpointError, match="no previous checkpoint"):
        checkpoint_io.save({"epoch": 1}, tmp_path / "last.pt")


def test_stale_temporary_files_are_removed_at_the_next_save(tmp_path):
    stale = tmp_path / ".last.pt.x1y2.tmp"
    stale.write_bytes(b"half")
    other = tmp_path / ".epoch_2.pt.x1y2.tmp"  # another file's: left to its own save
    other.write_bytes(b"half")
    checkpoint_io.save({"epoch": 1}, tmp_path / "last.pt")
    assert not stale.exists() and other.exists()


def test_failed_save_in_a_run_exits_1_with_the_message(tmp_path, monkeypatch, capsys):
    data = image_folder(tmp_path / "data")
    cfg = config.load("digits_moco.yaml", [f"out_dir={tmp_path / 'run'}", f"data.root={data}",
                                           *SMALL, "train.epochs=1"])  # fmt: skip

    def full_disk(obj, f, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    assert loop.main(cfg) == 1
    err = capsys.readouterr().err
    assert "cannot write checkpoint" in err and "no previous checkpoint" in err


# items 8 and 10: refusals of the run itself -------------------------------------------------


def test_checkpoint_without_its_queue_is_a_clear_error(tmp_path):
    data = image_folder(tmp_path / "data")
    run = tmp_path / "run"
    assert pretrain(run, data, "train.epochs=1").returncode == 0
    state = last_state(run)
    del state["queue"]
    torch.save(state, run / "checkpoints" / "last.pt")
    bad = pretrain(run, data, "train.epochs=2")
    assert bad.returncode == 1, bad.stderr
    assert "lacks queue" in bad.stderr and "Traceback" not in bad.stderr


def test_last_pt_that_is_a_directory_is_named_as_such(tmp_path):
    (tmp_path / "checkpoints" / "last.pt").mkdir(parents=True)
    with pytest.raises(CheckpointError, match=r"last\.pt is a directory, not a checkpoint file"):
        checkpoint_io.load(tmp_path / "checkpoints" / "last.pt")


def test_corrupt_checkpoint_message_does_not_advise_unsafe_loading(tmp_path):
    """A file that needs pickle's globals: the message says corrupt or not a checkpoint, and does
    not pass on torch's advice to load it with weights_only=False (unsafe for a file of unknown
    origin)."""
    path = tmp_path / "last.pt"
    torch.save({"format": checkpoint_io.FORMAT, "model": torch.nn.Linear(2, 2)}, path)
    with pytest.raises(CheckpointError) as e:
        checkpoint_io.load(path)
    message = str(e.value)
    assert "corrupt or not a torch checkpoint" in message
    assert "weights_only" not in message and "trust" not in message


def test_resume_with_fewer_epochs_than_done_is_refused_and_config_kept(tmp_path):
    data = image_folder(tmp_path / "data")
    run = tmp_path / "run"
    assert pretrain(run, data, "train.epochs=2", "eval.knn_every=0").returncode == 0
    before = (run / "config.yaml").read_text()
    tb = tensorboard_files(run)
    bad = pretrain(run, data, "train.epochs=1", "eval.knn_every=0")
    assert bad.returncode == 2, bad.stderr
    assert "train.epochs=1" in bad.stderr and "2 epochs" in bad.stderr
    assert (run / "config.yaml").read_text() == before
    assert tensorboard_files(run) == tb
    same = pretrain(run, data, "train.epochs=2", "eval.knn_every=0")  # finished: nothing to do
    assert same.returncode == 0, same.stderr


def test_refused_resume_leaves_no_tensorboard_file(tmp_path):
    data = image_folder(tmp_path / "data")
    run = tmp_path / "run"
    assert pretrain(run, data, "train.epochs=1", "eval.knn_every=0").returncode == 0
    tb = tensorboard_files(run)
    assert len(tb) == 1
    time.sleep(1.1)  # event file names carry the second they were made
    bad = pretrain(run, data, "train.epochs=1", "moco.temperature=0.5")
    assert bad.returncode == 2 and "different config" in bad.stderr
    assert tensorboard_files(run) == tb


def test_skipped_images_are_reported_at_the_end_of_a_short_epoch(tmp_path):
    data = image_folder(tmp_path / "data", bad_train=True)
    run = tmp_path / "run"
    done = pretrain(run, data, "train.epochs=1", "train.log_every=100", "eval.knn_every=0",
                    "data.skip_bad_images=true")  # fmt: skip
    assert done.returncode == 0, done.stderr
    (epoch,) = records(run, "epoch")
    assert epoch["skipped_images"] == 1
    assert "skipped_images=1" in done.stdout


def test_troubleshooting_quotes_the_new_checkpoint_messages_word_for_word(tmp_path, monkeypatch):
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    path = tmp_path / "last.pt"
    path.mkdir()
    with pytest.raises(CheckpointError) as e:
        checkpoint_io.load(path)
    found = [str(e.value).replace(str(path), "PATH")]
    path.rmdir()
    checkpoint_io.save({"epoch": 1}, path)

    def full_disk(obj, f, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(CheckpointError) as e:
        checkpoint_io.save({"epoch": 2}, path)
    monkeypatch.undo()
    message = str(e.value).replace(str(path), "PATH").replace(str(tmp_path), "DIR")
    found.append(re.sub(r"\d+\.\d GiB free", "0.0 GiB free", message))
    for message in found:
        assert f"`{message}`" in page, message


def test_the_last_epoch_is_saved_and_evaluated_when_the_intervals_do_not_divide_it(tmp_path):
    """E09 (the last epoch saved only when ``train.ckpt_every`` divides it: ``last.pt`` held
    epoch 2 of 3) and E10 (evaluated only when ``eval.knn_every`` divides it)."""
    from tests.helpers.inproc import pretrain
    from tests.helpers.runs import lines

    out = tmp_path / "run"
    done = pretrain("--cfg", "digits_moco.yaml", f"out_dir={out}", *SUBSET_RUN,
                    "train.epochs=3", "train.ckpt_every=2", "eval.knn_every=2")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert checkpoint_io.load(out / "checkpoints" / "last.pt")["epoch"] == 3
    assert ["knn_top1" in r for r in lines(out, "epoch")] == [False, True, True]


def test_the_run_eta_counts_the_steps_to_max_steps(tmp_path, monkeypatch):
    """E11: the run's ETA is over the steps until ``train.max_steps`` when that comes first (an
    ETA over the whole schedule ignored it)."""
    from pretrain.runtime.progress import Progress
    from tests.helpers.inproc import pretrain

    seen = []
    monkeypatch.setattr(Progress, "report", lambda self, record, *, step_in_epoch, steps_left:
                        seen.append(steps_left))  # fmt: skip
    done = pretrain("--cfg", "digits_moco.yaml", f"out_dir={tmp_path}", *SUBSET_RUN,
                    "train.epochs=5", "train.max_steps=3", "train.log_every=1",
                    "eval.knn_every=0")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert seen == [2, 1, 0]


@pytest.mark.parametrize("path", ["triton", "triton_onepass"])
def test_a_triton_split_bn_path_on_a_cpu_run_exits_2_before_any_work(tmp_path, monkeypatch, path):
    """Either Triton path of split BN forced on a CPU run (no interpreter): exit 2 naming the key
    and its value, the message docs/troubleshooting.md quotes, and no checkpoint written."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    out = runs.pretrain(tmp_path, "model.bn_splits=2", f"model.split_bn={path}")
    assert out.returncode == 2, out.stderr[-2000:]
    want = (f"config key 'model.split_bn' = {path!r} needs a CUDA device (this run is on cpu); "
            "set model.split_bn=auto")  # fmt: skip
    assert want in out.stderr
    assert not (tmp_path / "checkpoints").exists()
