"""``scripts/make_imagenet100.py`` on a fake ILSVRC-2012 tree: the 100 CMC classes of train (class
folders and per-class tars) and of a flat val folder with Kaggle's labels, read back by the
ImageNet-100 reader that training uses; a download that lacks a class is refused before anything
is written."""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

from pretrain.data import datasets
from tests.helpers import inproc
from tests.helpers.paths import ROOT

SCRIPT = ROOT / "scripts" / "make_imagenet100.py"
OTHER = ["n09999991", "n09999992"]  # classes of the download that are not in ImageNet-100


def jpeg(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG")
    return out.getvalue()


def fake_ilsvrc(root: Path, as_tars: int = 30) -> dict[str, list[str]]:
    """train/: the first ``as_tars`` classes as ``<wnid>.tar``, the rest as folders (2 images
    each); val/: flat ``ILSVRC2012_val_*.JPEG`` (one per class) and ``LOC_val_solution.csv``."""
    wnids = datasets.imagenet100_classes() + OTHER
    val_of: dict[str, list[str]] = {}
    rows = ["ImageId,PredictionString"]
    for i, wnid in enumerate(wnids):
        names = [f"{wnid}_{j}.JPEG" for j in range(2)]
        if i < as_tars:
            (root / "train").mkdir(parents=True, exist_ok=True)
            with tarfile.open(root / "train" / f"{wnid}.tar", "w") as tar:
                for j, name in enumerate(names):
                    data = jpeg(10 * i + j)
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        else:
            for j, name in enumerate(names):
                path = root / "train" / wnid / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(jpeg(10 * i + j))
        stem = f"ILSVRC2012_val_{i + 1:08d}"
        (root / "val").mkdir(exist_ok=True)
        (root / "val" / f"{stem}.JPEG").write_bytes(jpeg(100_000 + i))
        rows.append(f"{stem},{wnid} 1 2 3 4")
        val_of[wnid] = [f"{stem}.JPEG"]
    (root / "LOC_val_solution.csv").write_text("\n".join(rows) + "\n")
    return val_of


def make(*args: str, process: bool = False) -> subprocess.CompletedProcess:
    """The script with ``args``: as a process (``process``: the command a user types), else its
    ``main`` in this process (``tests/helpers/inproc.py``)."""
    if process:
        return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                              text=True, timeout=300, cwd=ROOT)  # fmt: skip
    spec = importlib.util.spec_from_file_location("make_imagenet100", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return inproc.run(script.main, list(args))


def test_builds_the_subset_that_the_training_reader_reads(tmp_path):
    src, dest = tmp_path / "ilsvrc", tmp_path / "in100"
    val_of = fake_ilsvrc(src)
    done = make("--train", str(src / "train"), "--val", str(src / "val"), "--val-labels",
                str(src / "LOC_val_solution.csv"), str(dest), process=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "100 classes, 200 train and 100 val images" in done.stdout
    assert f"data.root={dest.resolve()}" in done.stdout
    wnids = datasets.imagenet100_classes()
    assert sorted(p.name for p in (dest / "train").iterdir()) == sorted(wnids)
    assert sorted(p.name for p in (dest / "val").iterdir()) == sorted(wnids)
    for wnid in wnids:  # the val image of each class lands in its class folder, bytes intact
        (name,) = val_of[wnid]
        assert (dest / "val" / wnid / name).read_bytes() == (src / "val" / name).read_bytes()
        assert len(list((dest / "train" / wnid).iterdir())) == 2
    assert (dest / "val" / wnids[50] / val_of[wnids[50]][0]).is_symlink()  # no copy by default
    train = datasets.build("imagenet100", str(dest), "train")
    val = datasets.build("imagenet100", str(dest), "val")
    assert len(train) == 200 and len(val) == 100
    assert datasets.labels(val) == list(range(100))  # one image per class, in the CMC order
    # sorted val folders work as well (the layout the first run wrote)
    again = make("--train", str(dest / "train"), "--val", str(dest / "val"), "--copy",
                 str(tmp_path / "copy"))  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert not (tmp_path / "copy" / "val" / wnids[0] / val_of[wnids[0]][0]).is_symlink()


def test_a_missing_class_is_refused_before_anything_is_written(tmp_path):
    src, dest = tmp_path / "ilsvrc", tmp_path / "in100"
    fake_ilsvrc(src, as_tars=0)
    gone = datasets.imagenet100_classes()[7]
    for f in (src / "train" / gone).iterdir():
        f.unlink()
    (src / "train" / gone).rmdir()
    done = make("--train", str(src / "train"), "--val", str(src / "val"), "--val-labels",
                str(src / "LOC_val_solution.csv"), str(dest))  # fmt: skip
    assert done.returncode == 2
    assert f"1 of the 100 ImageNet-100 classes are missing under {src / 'train'} (first: {gone})" \
        in done.stderr  # fmt: skip
    assert not dest.exists() or not any(dest.iterdir())
    unsorted = make("--train", str(src / "train"), "--val", str(src / "val"), str(dest))
    assert unsorted.returncode == 2 and "--val-labels" in unsorted.stderr
