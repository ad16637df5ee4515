"""The tests' tiny datasets and embeddings: the package's recipe (:mod:`pretrain.testing.fakedata`),
shared with the benchmarks, so both draw the same data."""

from __future__ import annotations

from pretrain.testing.fakedata import (
    cifar_rows,
    dump,
    embeddings,
    random_images,
    write_cifar10,
    write_imagenet100,
    write_png,
)

__all__ = ["cifar_rows", "dump", "embeddings", "random_images", "write_cifar10",
           "write_imagenet100", "write_png"]  # fmt: skip
