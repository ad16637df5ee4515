"""Class folders of tiny PNGs on disk (``train/c0``, ``train/c1``, ... or named classes), the
run overrides that train on them, and a read denied as it is to a user without the right."""

from __future__ import annotations

import builtins
import os
from pathlib import Path

from pretrain.testing.fakedata import random_images, write_png

TRAIN = {"ant": 2, "cat": 3, "owl": 2}  # class -> images


def write_split(root: Path, split: str, counts: dict[str, int], seed: int = 0) -> None:
    imgs = random_images(sum(counts.values()), 8, seed)
    i = 0
    for name, n in counts.items():
        for j in range(n):
            write_png(root / split / name / f"{j}.png", imgs[i])
            i += 1


def deny(monkeypatch, path: Path) -> None:
    """Reads of ``path`` fail as they do for a user without the right (tests run as root, where
    chmod 000 blocks nothing): os.scandir for a folder, open for a file."""
    real_scandir, real_open = os.scandir, builtins.open

    def scandir(p=".", *a, **k):
        if os.fspath(p) == str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(p, *a, **k)

    def fake_open(p, *a, **k):
        if isinstance(p, (str, os.PathLike)) and os.fspath(p) == str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(p, *a, **k)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(builtins, "open", fake_open)


RUN = ["data.name=imagefolder", "data.image_size=16", "data.eval_resize=16",
       "data.test_split=train", "train.epochs=1", "eval.knn_k=5"]  # fmt: skip


def folder(root: Path, n: int) -> None:
    for i, img in enumerate(random_images(n, 16, seed=0)):
        write_png(root / "train" / f"c{i % 2}" / f"{i:03d}.png", img)


def labels_by_folder(ds) -> list[tuple[str, int]]:
    """(class folder the file sits in, label the dataset gives it) per sample."""
    return [(Path(p).parent.name, y) for p, y in ds.samples]
