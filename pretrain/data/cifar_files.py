"""What a CIFAR-10/100 batch and meta file must hold, checked as each is read and before any of
it is used: ``data`` a uint8 array of N rows of 3072 pixel values (1024 red, green, then blue),
the labels (``labels``, CIFAR-100's ``fine_labels``) a list of N class numbers below the class
count, the meta file's class names a list of that many texts. Anything else is refused naming
the file: a list of lists as ``data`` would be stacked into gigabytes by ``np.vstack``, and a
label past the class count would fail only in the kNN monitor, after a whole epoch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pretrain.data.pickles import not_a, short

PIXELS = 3 * 32 * 32


def _kind(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"a {value.shape} array of {value.dtype}"
    if type(value) is list:
        return f"a list of {len(value)}"
    return f"a {type(value).__name__}"


def batch(entry: dict, path: Path, labels_key: str, classes: int) -> tuple[np.ndarray, list[int]]:
    """``entry``'s pixel rows and labels, checked (``entry`` as :func:`pickles.read_pickle` read
    it from ``path``)."""
    for key in ("data", labels_key):
        if key not in entry:
            raise not_a(path, "CIFAR batch", f"it has no {key!r} entry")
    data, labels = entry["data"], entry[labels_key]
    if not (
        isinstance(data, np.ndarray)
        and data.dtype == np.uint8
        and data.ndim == 2
        and data.shape[1] == PIXELS
    ):
        raise not_a(
            path,
            "CIFAR batch",
            f"its 'data' is {_kind(data)}, not a (N, {PIXELS}) array of uint8",
        )
    if type(labels) is not list:
        raise not_a(
            path,
            "CIFAR batch",
            f"its {labels_key!r} is {_kind(labels)}, not a list of {len(data)} class numbers",
        )
    if len(labels) != len(data):
        raise not_a(
            path,
            "CIFAR batch",
            f"it has {len(data)} rows of 'data' but {len(labels)} {labels_key!r}",
        )
    bad = next(
        (i for i, y in enumerate(labels) if type(y) is not int or not 0 <= y < classes), None
    )
    if bad is not None:
        raise not_a(
            path,
            "CIFAR batch",
            f"its {labels_key!r} hold {short(labels[bad])} at index {bad}, not a class number in "
            f"[0, {classes})",
        )
    return data, labels


def class_names(meta: dict, path: Path, key: str, classes: int) -> list[str]:
    """The meta file's ``key`` (``label_names``, CIFAR-100's ``fine_label_names``), checked."""
    if key not in meta:
        raise not_a(path, "CIFAR meta", f"it has no {key!r} entry")
    names = meta[key]
    found = _kind(names)
    if type(names) is list and len(names) == classes:
        odd = [type(n).__name__ for n in names if type(n) is not str]
        if not odd:
            return names
        found = f"a list holding a {odd[0]}"
    raise not_a(path, "CIFAR meta", f"its {key!r} is {found}, not a list of {classes} class names")
