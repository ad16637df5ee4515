"""Tiny datasets written in their true on-disk formats, for loading through the real readers, and
embedding-like unit vectors: one data recipe for negmine's tests, its
benchmarks and a plugin's own tests."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from pretrain.data.datasets import imagenet100_classes


def random_images(n: int, size: int, seed: int) -> np.ndarray:
    """(n, size, size, 3) uint8 HWC images."""
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def dump(obj: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(obj, protocol=2))


def cifar_rows(hwc: np.ndarray) -> np.ndarray:
    """CIFAR's row layout: (n, 3072) with the 1024 R, then G, then B values of each image."""
    return hwc.transpose(0, 3, 1, 2).reshape(len(hwc), -1)


def write_cifar10(root: Path, per_batch: int = 16, test: int = 16, seed: int = 0) -> dict:
    """Write ``root/cifar-10-batches-py/`` (5 train batches, test, meta); return the arrays."""
    folder = root / "cifar-10-batches-py"
    train = random_images(5 * per_batch, 32, seed)
    train_y = [i % 10 for i in range(5 * per_batch)]
    for b in range(5):
        part = slice(b * per_batch, (b + 1) * per_batch)
        dump(
            {"data": cifar_rows(train[part]), "labels": train_y[part]},
            folder / f"data_batch_{b + 1}",
        )
    test_x = random_images(test, 32, seed + 1)
    test_y = [i % 10 for i in range(test)]
    dump({"data": cifar_rows(test_x), "labels": test_y}, folder / "test_batch")
    dump({"label_names": [f"c{i}" for i in range(10)]}, folder / "batches.meta")
    return {"train": train, "train_y": train_y, "test": test_x, "test_y": test_y}


def write_png(path: Path, hwc: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(hwc).save(path)


def write_imagenet100(root: Path, per_class: int = 1, size: int = 32, seed: int = 0) -> list[str]:
    """``root/{train,val}/<wnid>/*.png`` for the 100 CMC classes; returns the wnids."""
    wnids = imagenet100_classes()
    images = random_images(len(wnids) * per_class, size, seed)
    for split in ("train", "val"):
        for c, wnid in enumerate(wnids):
            for j in range(per_class):
                write_png(root / split / wnid / f"{wnid}_{j}.png", images[c * per_class + j])
    return wnids


def embeddings(
    n_fit: int,
    n_queue: int,
    seed: int,
    d: int = 128,
    clusters: int = 16,
    spread: float = 2.0,
    views: float = 0.3,
    dup: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Embedding-like float32 unit vectors for OC-SVM tests and benchmarks: fit = cat(q, k) of
    n_fit // 2 points near 16 centres (``dup``: q = k exactly, for ties); queue half near the
    centres, half uniform."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)

    def near(m: int) -> np.ndarray:
        return centres[rng.integers(0, clusters, m)] + spread * rng.standard_normal((m, d)) / d**0.5

    base = near(n_fit // 2)
    q, k = (base if dup else base + views * rng.standard_normal(base.shape) / d**0.5 for _ in "qk")
    queue = np.concatenate([near(n_queue // 2), rng.standard_normal((n_queue - n_queue // 2, d))])
    X, Q = (
        torch.from_numpy(a / np.linalg.norm(a, axis=1, keepdims=True)).float()
        for a in (np.concatenate([q, k]), queue)
    )
    return X, Q
