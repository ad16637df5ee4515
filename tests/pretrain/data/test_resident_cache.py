"""The decode-once cache of ``data.resident``: a file rewritten with
its size and mtime kept is decoded again; a zeroed, truncated, foreign or incomplete cache is
rebuilt with one warning naming it; ``data.skip_bad_images`` holds on reuse (the same per-epoch
skip count as the loader path, and with skipping off the unreadable file is an error, not a
substitute); a cache folder that cannot be written is named as such, not as data.root."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from pretrain.config import ConfigError
from pretrain.data import datasets, imagefiles, resident
from pretrain.testing.fakedata import random_images
from tests.helpers.decode_cache import cache_file, expected, folder, warnings_of, write_raw_png
from tests.helpers.runs import lines, pretrain
from tests.helpers.troubleshooting_quotes import assert_documented


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(imagefiles, "_WARNED", set())


def test_a_file_rewritten_with_its_size_and_mtime_kept_is_decoded_again(tmp_path):
    paths = folder(tmp_path / "d")
    ds = datasets.build("imagefolder", str(tmp_path / "d"), "train")
    cache = tmp_path / "cache"
    resident.load(ds, cache, workers=0)
    st = paths[3].stat()
    write_raw_png(paths[3], random_images(1, 16, seed=99)[0])  # in place: same inode
    os.utime(paths[3], ns=(st.st_atime_ns, st.st_mtime_ns))
    assert paths[3].stat().st_size == st.st_size and paths[3].stat().st_mtime_ns == st.st_mtime_ns
    images, _, _ = resident.load(ds, cache, workers=0)
    assert torch.equal(images, expected(ds))  # not the stale decode
    replacement = tmp_path / "new.png"  # replaced by a rename: another inode
    write_raw_png(replacement, random_images(1, 16, seed=98)[0])
    st = paths[5].stat()
    os.replace(replacement, paths[5])
    os.utime(paths[5], ns=(st.st_atime_ns, st.st_mtime_ns))
    images, _, _ = resident.load(ds, cache, workers=0)
    assert torch.equal(images, expected(ds))


def zero_images(path: Path) -> None:
    """Zero the array's bytes, its header kept (what a crash before the data reached the disk
    can leave): np.load reads it without complaint."""
    array = np.load(path, mmap_mode="r+")
    array[:] = 0
    array.flush()
    del array


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def foreign(path: Path) -> None:
    np.save(path, np.zeros((5, 7), dtype=np.float32))


def missing_labels(path: Path) -> None:
    path.with_suffix(".labels.npy").unlink()


def not_numpy(path: Path) -> None:
    path.write_bytes(b"not a numpy file at all")


@pytest.mark.parametrize("damage", [zero_images, truncate, foreign, missing_labels, not_numpy])
def test_a_damaged_cache_is_rebuilt_with_one_warning_naming_it(tmp_path, capsys, damage):
    folder(tmp_path / "d")
    ds = datasets.build("imagefolder", str(tmp_path / "d"), "train")
    cache = tmp_path / "cache"
    resident.load(ds, cache, workers=0)
    path = cache_file(cache)
    damage(path)
    capsys.readouterr()
    images, labels, _ = resident.load(ds, cache, workers=0)
    assert torch.equal(images, expected(ds))
    assert labels.tolist() == [y for _, y in ds.samples]
    (warning,) = warnings_of(capsys)
    assert warning.startswith(f"the decoded-image cache file {path} is corrupt (")
    assert_documented(warning)
    again, _, _ = resident.load(ds, cache, workers=0)  # rewritten: read without a warning
    assert torch.equal(again, images) and not warnings_of(capsys)


def test_the_content_check_sees_a_zeroed_cache_that_loads_cleanly(tmp_path):
    """The check (a checksum per image) is what catches zeroing: the array alone loads fine."""
    folder(tmp_path / "d")
    ds = datasets.build("imagefolder", str(tmp_path / "d"), "train")
    held = resident.load(ds, tmp_path / "cache", workers=0)
    zero_images(cache_file(tmp_path / "cache"))
    assert np.load(cache_file(tmp_path / "cache")).shape == tuple(held.images.shape)
    assert resident._read_cache(cache_file(tmp_path / "cache"), ds.samples) is None


def with_bad_file(root: Path, n: int = 12) -> Path:
    folder(root, n)
    bad = root / "train" / "c1" / "005.png"
    bad.write_bytes(b"\x89PNG not really")
    return bad


def test_skip_bad_images_holds_when_the_cache_is_reused(tmp_path, monkeypatch):
    bad = with_bad_file(tmp_path / "d")
    counter = imagefiles.skip_counter()
    ds = datasets.build("imagefolder", str(tmp_path / "d"), "train", skip_bad=counter)
    cache = tmp_path / "cache"
    first = resident.load(ds, cache, workers=0)
    index = [p for p, _ in ds.base.samples].index(str(bad))
    assert first.skips.tolist() == [int(i == index) for i in range(len(ds))]
    assert int(counter.sum()) == 0  # the one-time decode is not a read of the loader path

    def no_decode(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("decoded again")

    monkeypatch.setattr(resident, "decode", no_decode)
    again = resident.load(ds, cache, workers=0)
    assert torch.equal(again.skips, first.skips)  # the substitute is still known as one
    plain = datasets.build("imagefolder", str(tmp_path / "d"), "train")  # skipping off
    with pytest.raises(imagefiles.BadImageError, match=f"cannot read image {bad}"):
        resident.load(plain, cache, workers=0)


SKIP_RUN = ["data.name=imagefolder", "data.image_size=16", "data.eval_resize=16",
            "data.skip_bad_images=true", "train.epochs=2", "eval.knn_every=1",
            "data.test_split=train", "train.log_every=100", "eval.knn_k=5"]  # fmt: skip


def test_per_epoch_skip_counts_are_the_loaders_and_survive_the_cache(tmp_path, monkeypatch):
    """One unreadable image among 64 (two whole batches): every epoch reads it once for
    training, and each kNN monitor once in the bank and once in the held-out split, on both
    paths; a second resident run that reuses the cache counts the same; with
    data.skip_bad_images=false and that cache the run fails naming the file, as without it."""
    root = tmp_path / "d"
    bad = with_bad_file(root, n=64)
    monkeypatch.setenv(resident.CACHE_ENV, str(tmp_path / "shared"))
    counts = {}
    for name, mode in (("loader", "off"), ("resident", "device"), ("reused", "device")):
        out = tmp_path / name
        done = pretrain(out, f"data.root={root}", f"data.resident={mode}", *SKIP_RUN)
        assert done.returncode == 0, done.stderr[-3000:]
        counts[name] = [r["skipped_images"] for r in lines(out, "epoch")]
    assert counts["loader"] == counts["resident"] == counts["reused"], counts
    assert counts["loader"] == [1, 4], counts  # 1 in epoch 1; + 2 (monitor) + 1 in epoch 2
    over = [a for a in SKIP_RUN if a != "data.skip_bad_images=true"]
    done = pretrain(tmp_path / "strict", f"data.root={root}", "data.resident=device", *over)
    assert done.returncode == 1
    assert f"error: cannot read image {bad}" in done.stderr


def test_a_cache_folder_that_is_a_file_is_named_not_data_root(tmp_path, monkeypatch):
    folder(tmp_path / "d")
    ds = datasets.build("imagefolder", str(tmp_path / "d"), "train")
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv(resident.CACHE_ENV, str(blocker))
    with pytest.raises(ConfigError) as info:
        resident.load(ds, resident.cache_dir(tmp_path / "run"), workers=0)
    message = str(info.value)
    assert message.startswith(f"{resident.CACHE_ENV}={blocker} cannot hold the decoded training")
    assert "data.root" not in message
    assert_documented(message)
