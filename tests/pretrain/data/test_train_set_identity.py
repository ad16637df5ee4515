"""The checkpoint records the training set's identity and a resume on other data is refused with
exit 2 unless ``data.resume_on_changed_data=true``: a folder that shrank or
whose images changed class between a stop and its resume; a dataset moved to another data.root
resumes as before."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import torch

from pretrain.data import datasets, identity
from pretrain.runtime import checkpoint_io
from pretrain.testing.fakedata import random_images, write_png
from tests.helpers.folders import RUN, folder
from tests.helpers.runs import lines, pretrain
from tests.helpers.troubleshooting_quotes import assert_documented


def stopped_run(tmp_path: Path, n: int = 96) -> tuple[Path, Path]:
    root, out = tmp_path / "d", tmp_path / "run"
    folder(root, n)
    done = pretrain(out, f"data.root={root}", "train.max_steps=2", *RUN)
    assert done.returncode == 0, done.stderr[-2000:]
    state = checkpoint_io.load(out / "checkpoints" / "last.pt", map_location="cpu")
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


def same_names(root: Path, images: np.ndarray) -> None:
    """A folder of two classes whose file names and labels depend on the number of images only."""
    for i, img in enumerate(images):
        write_png(root / "train" / f"c{i % 2}" / f"{i:03d}.png", img)


def test_a_folder_of_other_images_under_the_same_names_has_another_digest(tmp_path):
    """Paths and labels alone would call two datasets with the same file names one set: the
    digest covers each file's size, so other images differ; a copy (new mtimes) is the same set."""
    same_names(tmp_path / "a", random_images(6, 16, seed=0))
    same_names(tmp_path / "b", np.zeros((6, 16, 16, 3), np.uint8))  # flat: other PNG sizes
    copy = tmp_path / "copy"
    for src in sorted((tmp_path / "a").rglob("*.png")):  # shutil.copy: the mtimes are new
        (copy / src.parent.relative_to(tmp_path / "a")).mkdir(parents=True, exist_ok=True)
        shutil.copy(src, copy / src.relative_to(tmp_path / "a"))
    ids = {
        k: identity.train_set_identity(
            datasets.build("imagefolder", str(tmp_path / k), "train"), tmp_path / k
        )  # fmt: skip
        for k in ("a", "b", "copy")
    }
    assert ids["a"]["names_sha256"] == ids["b"]["names_sha256"]  # same names and labels
    assert ids["a"]["sha256"] != ids["b"]["sha256"] and ids["a"]["covers"] == identity.FILES_COVER
    assert ids["copy"] == ids["a"]
    # the re-derivation: sha256 over "relative path, label, size" lines in the dataset's order
    ds = datasets.build("imagefolder", str(tmp_path / "b"), "train")
    lines = "".join(
        f"{Path(p).relative_to(tmp_path / 'b')}\t{y}\t{Path(p).stat().st_size}\n"
        for p, y in ds.samples
    )
    assert ids["b"]["sha256"] == hashlib.sha256(lines.encode()).hexdigest()
    # a checkpoint of older code recorded the paths and labels only: checked on those
    old = {"size": 6, "kind": "files", "sha256": ids["a"]["names_sha256"]}
    assert identity.resume_problem(old, ids["b"]) is None
    assert "their digests differ" in identity.resume_problem(ids["a"], ids["b"])
    renamed = {**old, "sha256": "0" * 64}
    assert "their digests differ" in identity.resume_problem(renamed, ids["a"])


def test_relabelling_an_image_list_changes_the_identity_and_the_cache_key(tmp_path):
    """D01 and D03: the label is part of the training set's identity (a resume on a relabelled
    list is refused) and of the decode cache's key (the cache is not served for other labels)."""
    from pretrain.data import datasets, identity, resident
    from tests.helpers.folders import folder

    folder(tmp_path, 8)
    files = sorted((tmp_path / "train").rglob("*.png"))
    lines = [f"{p.relative_to(tmp_path)} {int(p.parent.name[1])}" for p in files]
    relabelled = [*lines[:-1], lines[-1][:-1] + str(1 - int(lines[-1][-1]))]
    got = {}
    for name, text in (("a", lines), ("b", relabelled)):
        (tmp_path / f"{name}.txt").write_text("\n".join(text) + "\n")
        ds = datasets.build("imagefolder", str(tmp_path), f"{name}.txt")
        got[name] = (identity.train_set_identity(ds, tmp_path)["sha256"],
                     resident.cache_key(ds.samples))  # fmt: skip
    assert got["a"][0] != got["b"][0], "the identity ignores the labels"
    assert got["a"][1] != got["b"][1], "the cache key ignores the labels"
