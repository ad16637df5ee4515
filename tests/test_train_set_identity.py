"""The checkpoint records the training set's identity and a resume on other data is refused with
exit 2 unless ``data.resume_on_changed_data=true``: a folder that shrank or
whose images changed class between a stop and its resume; a dataset moved to another data.root
resumes as before."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from fakedata import random_images, write_png
from test_engine import lines, pretrain
from test_troubleshooting_data import assert_documented

from pretrain.data import datasets, identity
from pretrain.engine import checkpoint

RUN = ["data.name=imagefolder", "data.image_size=16", "data.eval_resize=16",
       "data.test_split=train", "train.epochs=1", "eval.knn_k=5"]  # fmt: skip


def folder(root: Path, n: int) -> None:
    for i, img in enumerate(random_images(n, 16, seed=0)):
        write_png(root / "train" / f"c{i % 2}" / f"{i:03d}.png", img)


def stopped_run(tmp_path: Path, n: int = 96) -> tuple[Path, Path]:
    root, out = tmp_path / "d", tmp_path / "run"
    folder(root, n)
    done = pretrain(out, f"data.root={root}", "train.max_steps=2", *RUN)
    assert done.returncode == 0, done.stderr[-2000:]
    state = checkpoint.load(out / "checkpoints" / "last.pt", map_location="cpu")
    assert state["global_step"] == 2 and state["train_set"]["size"] == n
    return root, out


def test_a_resume_on_a_shrunk_training_set_is_refused_unless_overridden(tmp_path):
    root, out = stopped_run(tmp_path)
    for i in range(70, 96):  # 96 -> 70 images: 2 steps per epoch instead of 3
        (root / "train" / f"c{i % 2}" / f"{i:03d}.png").unlink()
    before = (out / "derived.yaml").read_text()
    done = pretrain(out, f"data.root={root}", *RUN)
    assert done.returncode == 2, done.stderr[-2000:]
    message = done.stderr.strip().splitlines()[-1].removeprefix("error: ")
    assert message.startswith(
        f"{out}: the training set changed since the checkpoint (96 images "
        "then, 70 now; another size): "
    )
    assert_documented(message)
    assert (out / "derived.yaml").read_text() == before  # nothing rewritten
    assert not lines(out, "epoch")
    done = pretrain(out, f"data.root={root}", "data.resume_on_changed_data=true", *RUN)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resuming at epoch 1 step 2" in done.stdout


def test_a_relabelled_image_is_refused_and_a_moved_dataset_resumes(tmp_path):
    root, out = stopped_run(tmp_path)
    moved = tmp_path / "elsewhere"
    shutil.copytree(root, moved)  # the same files under another data.root
    src = moved / "train" / "c0" / "000.png"
    relabelled = tmp_path / "relabelled"
    shutil.copytree(moved, relabelled)
    (relabelled / "train" / "c0" / "000.png").rename(relabelled / "train" / "c1" / "000.png")
    done = pretrain(out, f"data.root={relabelled}", *RUN)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "(96 images then, 96 now; their digests differ)" in done.stderr
    assert src.exists()
    done = pretrain(out, f"data.root={moved}", *RUN)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resuming at epoch 1 step 2" in done.stdout


def test_the_identity_of_an_embedded_array_follows_its_images_and_labels():
    a = datasets.build("digits", "data", "train")
    b = datasets.build("digits", "data", "train")
    ia = identity.train_set_identity(a, "data")
    assert ia == identity.train_set_identity(b, "data") and ia["kind"] == "array"
    b.data = b.data.clone()
    b.data[7, 0, 3, 3] ^= 1  # one byte of one image
    assert identity.train_set_identity(b, "data")["sha256"] != ia["sha256"]
    c = datasets.build("digits", "data", "train")
    c.targets = [*c.targets[:-1], (c.targets[-1] + 1) % 10]  # one label
    assert identity.train_set_identity(c, "data")["sha256"] != ia["sha256"]
    sub = datasets.stratified_subset(a, 5, seed=0)
    assert identity.train_set_identity(sub, "data")["size"] == 50
    assert identity.resume_problem(None, ia) is None  # a checkpoint from before: not checked
    assert identity.resume_problem(ia, dict(ia)) is None
    assert torch.equal(a.data, datasets.build("digits", "data", "train").data)
