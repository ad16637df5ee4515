"""The decode cache's check is position-dependent: a cached image flipped
upside down, or with its R and B planes swapped, is caught (a sum of 64-bit words was not), and
the warning names the cause whole (it was once cut at "e.g")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pretrain.config import ConfigError
from pretrain.data import datasets, imagefiles, resident
from tests.helpers.decode_cache import cache_file, expected, folder, warnings_of
from tests.helpers.troubleshooting_quotes import assert_documented


def flip(path: Path) -> None:
    images = np.load(path)
    images[0] = images[0, :, ::-1].copy()  # upside down
    np.save(path, images)


def swap_rb(path: Path) -> None:
    images = np.load(path)
    images[0] = images[0, ::-1].copy()  # R and B planes swapped
    np.save(path, images)


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(imagefiles, "_WARNED", set())


@pytest.mark.parametrize("damage", [flip, swap_rb])
def test_a_reordered_cached_image_is_caught_and_decoded_again(tmp_path, capsys, damage):
    folder(tmp_path / "d")
    ds = datasets.build("imagefolder", str(tmp_path / "d"), "train")
    resident.load(ds, tmp_path / "cache", workers=0)
    path = cache_file(tmp_path / "cache")
    before = np.load(path)
    damage(path)
    assert not np.array_equal(np.load(path), before)  # the damage changed the pixels
    capsys.readouterr()
    images, _, _ = resident.load(ds, tmp_path / "cache", workers=0)
    assert torch.equal(images, expected(ds))
    (warning,) = warnings_of(capsys)
    assert warning == (
        f"the decoded-image cache file {path} is corrupt (ValueError: 1 image(s) differ from "
        f"their checksum (the first: {ds.samples[0][0]}; zeroed, flipped or overwritten)); "
        "decoding the training images again and rewriting it"
    )
    assert_documented(warning)


def test_a_full_cache_disk_leaves_no_temporary_file(tmp_path, monkeypatch):
    """A full disk while the cache was written left resident-*.npy.tmpPID."""
    folder(tmp_path / "d")
    ds = datasets.build("imagefolder", str(tmp_path / "d"), "train")
    held = resident.load(ds, tmp_path / "first", workers=0)

    def full(f, array) -> None:
        f.write(b"\x93NUMPY partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(resident.np, "save", full)
    with pytest.raises(ConfigError, match="cannot hold the decoded training images"):
        resident._write_cache(tmp_path / "cache" / "resident-x.npy", held)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == []
