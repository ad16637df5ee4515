"""The training set's identity, recorded in every checkpoint and checked on resume.

A resumed epoch indexes the sampler's permutation of the training set of the checkpoint; if the
set changed between a stop and its resume (images added, removed, relabelled or replaced), the
rest of the epoch reads other images and the counters lie. The identity is the set's size and a
sha256 over its labels and, for image files, their paths relative to ``data.root`` (so moving the
dataset keeps it) and their sizes in bytes; for an embedded array (digits, CIFAR, STL-10), each
image's checksum (:func:`checksums`, 64-bit word sums; 0.7 s at each start for CIFAR-10's
50,000 images on a busy 2-core CPU, mostly the copy of the HWC array). Data read another way is
identified by its size and labels. The same identity of the test split pairs and groups
evaluations (``linear_eval compare`` and ``table``).

Why sizes and not the files' contents or times: the contents would mean reading every byte at each
start (all of ImageNet-100 before the first step; the resident cache's per-image CRC-32,
:func:`pretrain.data.resident.image_crc32`, is of decoded pixels and exists only where that cache
decodes), and modification times change when a dataset is copied to another node, which would split
the seeds of one dataset. A size costs one ``stat`` per file (0.2 s for 126,700 files,
ImageNet-100's training split, on a 2-core machine with the file system's metadata cached; longer
on a cold or network file system) and tells apart another dataset under the same file names; a file
rewritten with other bytes of exactly its size is not seen. Records of older code (``kind: files``
without ``covers``) digest the paths and labels only: a resume compares them with the
``names_sha256`` of the set now, and ``table`` shows them as such.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from pretrain.data import datasets, device_decode, resident

#: What a folder's digest covers (``covers`` of its identity; absent from older records, whose
#: digest covers the paths and labels only).
FILES_COVER = "paths, labels, sizes"


def train_set_identity(ds: Dataset, root: str | Path) -> dict[str, Any]:
    """``{"size": N, "kind": "files" | "array" | "labels", "sha256": hex}`` of training set
    ``ds`` read under ``root``; image files add ``covers`` (:data:`FILES_COVER`) and
    ``names_sha256``, the digest of their paths and labels alone (what older code recorded)."""
    h = hashlib.sha256()
    files = device_decode.file_samples(ds)
    arrays = None if files is not None else resident.embedded(ds)
    extra: dict[str, str] = {}
    if files is not None:
        kind, base = "files", os.path.abspath(Path(root).expanduser())
        names = hashlib.sha256()
        for path, label in files:
            line = f"{os.path.relpath(os.path.abspath(path), base)}\t{label}"
            names.update(f"{line}\n".encode())
            h.update(f"{line}\t{os.path.getsize(path)}\n".encode())
        extra = {"covers": FILES_COVER, "names_sha256": names.hexdigest()}
    elif arrays is not None:
        kind, (images, labels) = "array", arrays
        h.update(f"{tuple(images.shape)}\n".encode())
        h.update(labels.numpy().astype(np.int64).tobytes())
        h.update(checksums(images.contiguous()).numpy().tobytes())
    else:
        kind = "labels"
        h.update(np.asarray(datasets.labels(ds), dtype=np.int64).tobytes())
    return {"size": len(ds), "kind": kind, "sha256": h.hexdigest(), **extra}


def legacy_files(ident: dict[str, Any]) -> bool:
    """A folder's identity recorded by older code: its digest covers paths and labels only."""
    return ident.get("kind") == "files" and "covers" not in ident


def same(saved: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether ``saved`` identifies the set ``now`` (an older folder record: by its paths and
    labels, all it covers)."""
    if legacy_files(saved):
        return saved.get("size") == now.get("size") and saved.get("sha256") == now.get(
            "names_sha256"
        )
    return saved == now


def resume_problem(saved: dict[str, Any] | None, now: dict[str, Any]) -> str | None:
    """Why a checkpoint of training set ``saved`` cannot resume on ``now`` (None: it can; a
    checkpoint from before the identity was recorded is not checked)."""
    what = change(saved, now)
    if what is None:
        return None
    return (
        f"{what}: the resumed epoch would read other images than the run's. Restore the training "
        "data, choose a new out_dir, or set data.resume_on_changed_data=true to resume anyway"
    )


def change(saved: dict[str, Any] | None, now: dict[str, Any]) -> str | None:
    """What changed between a checkpoint's training set ``saved`` and ``now``, with both sizes
    (None: nothing, or a checkpoint from before the identity was recorded)."""
    if not saved or same(saved, now):
        return None
    what = "their digests differ" if saved["size"] == now["size"] else "another size"
    return (
        f"the training set changed since the checkpoint ({saved['size']} images then, "
        f"{now['size']} now; {what})"
    )


def checksums(images: torch.Tensor) -> torch.Tensor:
    """Per image, the sum of its bytes read as 64-bit words, modulo 2**64 (int64): the pixels'
    part of an embedded array's digest; a zeroed or overwritten image, or a shifted array, changes
    it. Words, not bytes: 50,000 CIFAR images in ~50 ms (a byte sum to int64 took 6 s)."""
    rows = images.reshape(images.shape[0], -1).numpy()
    if rows.shape[1] % 8:  # pad each row to whole words (a copy, for odd sizes only)
        rows = np.pad(rows, ((0, 0), (0, -rows.shape[1] % 8)))
    words = np.ascontiguousarray(rows).view(np.uint64)
    return torch.from_numpy(words.sum(1, dtype=np.uint64).view(np.int64))
