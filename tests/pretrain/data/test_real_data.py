"""The trainer on image folders as researchers have them: train.max_steps with an exact resume,
progress lines where stderr is no terminal, unreadable images mid-epoch (named, or skipped and
counted), and the errors that must come before anything starts (exit 2, naming the path)."""

from __future__ import annotations

import io
import json
import re
import subprocess
from pathlib import Path

import pytest
import torch
from PIL import Image

from pretrain import build, config, losses
from pretrain.engine import loop
from pretrain.testing.fakedata import random_images
from tests.helpers import inproc
from tests.helpers.state_dicts import flat

TINY = [
    "data.name=imagefolder",
    "data.image_size=16",
    "data.eval_resize=16",
    "model.width=8",
    "model.bn_splits=2",
    "train.batch_size=16",
    "moco.queue_size=32",
    "train.deterministic=true",
    "train.log_every=1",
    "eval.knn_every=1",
    "eval.knn_k=5",
    "data.num_workers=0",
    "train.epochs=2",
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """CIFAR-10's JPEG-copy layout: train/<class>/*.jpg (2 x 24) and test/<class>/*.jpg (2 x 8)."""
    root = tmp_path_factory.mktemp("jpegs")
    imgs = random_images(64, 20, seed=3)
    for i, img in enumerate(imgs):
        split, cls = ("train" if i < 48 else "test"), ("cat" if i % 2 else "dog")
        path = root / split / cls / f"{i:03d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(path, quality=90)
    return root


def run(out: Path, root: Path, *extra: str) -> int:
    cfg = config.load("digits_moco.yaml", [f"out_dir={out}", f"data.root={root}", *TINY, *extra])
    return loop.main(cfg)


def records(out: Path, kind: str) -> list[dict]:
    rows = [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == kind]


def test_max_steps_checkpoints_and_resume_equals_uninterrupted(folder, tmp_path, capsys):
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert run(full, folder) == 0  # 3 steps per epoch, 2 epochs
    out = capsys.readouterr().out
    # stderr is no terminal here: one progress line per log step, and no config dump on stdout
    assert re.search(
        r"epoch 1 step 1/3 \(global 1\) loss \d+\.\d{4} lr \S+ \d+\.\d img/s data-wait \d+% "
        r"ETA epoch \d+:\d\d:\d\d run \d+:\d\d:\d\d",
        out,
    ), out
    assert "out_dir:" not in out and "resolved config" in out
    assert config.load(str(full / "config.yaml")).train.epochs == 2
    steps = records(full, "step")
    assert [r["global_step"] for r in steps] == list(range(1, 7))
    assert all(0 <= r["data_wait_frac"] <= 1 and r["images_per_s"] > 0 for r in steps)

    assert run(cut, folder, "train.max_steps=4") == 0
    out = capsys.readouterr().out
    assert "train.max_steps=4 reached: checkpoint saved at global step 4" in out
    mid = torch.load(cut / "checkpoints" / "last.pt", weights_only=True)
    assert (mid["epoch"], mid["step_in_epoch"], mid["global_step"]) == (1, 1, 4)
    assert run(cut, folder, "train.max_steps=4") == 0  # same limit: nothing more to do
    assert len(records(cut, "step")) == 4
    assert run(cut, folder, "train.max_steps=0") == 0  # lift it: the run continues
    assert "resuming at epoch 2 step 1" in capsys.readouterr().out
    a = torch.load(full / "checkpoints" / "last.pt", weights_only=True)
    b = torch.load(cut / "checkpoints" / "last.pt", weights_only=True)
    ta, tb = flat(a), flat(b)
    assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
    assert [r["global_step"] for r in records(cut, "step")] == list(range(1, 7))
    knn = [r["knn_top1"] for r in records(full, "epoch")]
    assert knn == [r["knn_top1"] for r in records(cut, "epoch")]


def test_unreadable_image_mid_epoch_is_named_or_skipped_and_counted(folder, tmp_path, capsys):
    root = tmp_path / "data"
    for path in folder.rglob("*.jpg"):
        target = root / path.relative_to(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    bad = root / "train" / "cat" / "013.jpg"
    buf = io.BytesIO()
    Image.fromarray(random_images(1, 20, 9)[0]).save(buf, "JPEG", quality=90)
    bad.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])  # truncated JPEG
    for workers in ("0", "1"):  # in the training process and in a loader worker
        status = run(tmp_path / f"named{workers}", root, f"data.num_workers={workers}")
        err = capsys.readouterr().err
        assert status == 1 and f"cannot read image {bad}" in err, err
        assert "data.skip_bad_images=true" in err and "Traceback" not in err
    assert run(tmp_path / "skip", root, "data.skip_bad_images=true", "data.num_workers=1") == 0
    steps = records(tmp_path / "skip", "step")
    assert steps[-1]["skipped_images"] >= 1  # 2 epochs, the bad image is met in each
    assert "skipped-images" in capsys.readouterr().out


class _NaNAfterFirstStep(losses.InfoNCE):
    """Diverges at the second step: the first step is finite (a loss that is non-finite at its
    first step from finite inputs is named by the first-step check,
    tests/pretrain/engine/test_first_step.py)."""

    calls = 0

    def forward(self, step: losses.Step) -> torch.Tensor:
        self.calls += 1
        return super().forward(step) * (float("nan") if self.calls > 1 else 1.0)


def test_divergence_before_any_checkpoint_names_none(folder, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(build, "loss_fn", lambda cfg, n=0: _NaNAfterFirstStep(cfg.moco.temperature))
    assert run(tmp_path, folder) == 1
    err = capsys.readouterr().err
    assert "non-finite loss at or before global step 2" in err
    assert "no checkpoint was written" in err and "last.pt" not in err
    assert not (tmp_path / "checkpoints" / "last.pt").exists()
    assert "lower train.base_lr" in err and "bf16" not in err  # fp32 on this CPU


def cli(out: Path, root: Path, *extra: str) -> subprocess.CompletedProcess:
    """``python -m pretrain`` on the image folder, in this process (``tests/helpers/inproc.py``)."""
    return inproc.pretrain("--cfg", "digits_moco.yaml", f"out_dir={out}", f"data.root={root}",
                           *TINY, *extra)  # fmt: skip


def test_errors_before_anything_starts_exit_2_naming_the_path(folder, tmp_path):
    empty = tmp_path / "empty"
    (empty / "train" / "cat").mkdir(parents=True)
    (empty / "test").mkdir()
    done = cli(tmp_path / "a", empty)
    assert done.returncode == 2 and str(empty / "train" / "cat") in done.stderr, done.stderr
    assert "hold no images" in done.stderr and "Traceback" not in done.stderr

    blocker = tmp_path / "file"
    blocker.write_text("a file where a folder should be")
    done = cli(blocker / "run", folder)
    assert done.returncode == 2 and f"out_dir {blocker / 'run'} cannot be written" in done.stderr
    assert "Traceback" not in done.stderr

    done = cli(tmp_path / "b", folder, "data.subset=4", "moco.queue_size=4")  # 8 images < 16
    assert done.returncode == 2 and "exceeds the training set (8 images" in done.stderr
    assert not (tmp_path / "b" / "checkpoints").exists()
