"""The decode-once cache of ``data.resident`` under test: a folder of uncompressed PNGs (a file's
size depends on its dimensions only), the images the readers decode, the cache file, and the
warnings a load printed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from pretrain.data import imagefiles
from pretrain.testing.fakedata import random_images


def write_raw_png(path: Path, hwc: np.ndarray) -> None:
    """An uncompressed PNG: its size depends on the image's dimensions only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(hwc).save(path, compress_level=0)


def folder(root: Path, n: int = 12, size: int = 16, seed: int = 0) -> list[Path]:
    paths = [root / "train" / f"c{i % 2}" / f"{i:03d}.png" for i in range(n)]
    for p, img in zip(paths, random_images(n, size, seed), strict=True):
        write_raw_png(p, img)
    return paths


def expected(ds) -> torch.Tensor:
    return torch.stack([imagefiles.read_image(p) for p, _ in ds.samples])


def warnings_of(capsys) -> list[str]:
    err = capsys.readouterr().err.splitlines()
    return [s.removeprefix("warning: ") for s in err if s.startswith("warning: ")]


def cache_file(cache: Path) -> Path:
    (path,) = [p for p in cache.glob("resident-*.npy") if p.name.count(".") == 1]
    return path
