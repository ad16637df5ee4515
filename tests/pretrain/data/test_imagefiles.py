"""Image folders and image lists (pretrain.data.imagefiles), data.subset and the loader-worker cap,
on small files written in their true formats (PNG decoded exactly, JPEG against PIL's decoder)."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from pretrain.data import datasets, imagefiles
from pretrain.data.datasets import DatasetNotFoundError
from pretrain.runtime import cores
from pretrain.testing.fakedata import random_images, write_png
from tests.helpers.troubleshooting_quotes import assert_documented


def chw_to_hwc(image: torch.Tensor) -> np.ndarray:
    return image.permute(1, 2, 0).numpy()


def write_truncated_jpeg(path, hwc) -> None:
    buf = io.BytesIO()
    Image.fromarray(hwc).save(buf, "JPEG", quality=90)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])


def test_cifar_style_test_folder_and_jpeg_pixels_equal_pil(tmp_path):
    imgs = random_images(4, 12, seed=1)
    for i, rel in enumerate(
        ["train/ship/a.jpg", "train/cat/b.jpg", "test/cat/c.jpg", "test/ship/d.jpg"]
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(imgs[i]).save(tmp_path / rel, quality=90)
    train = datasets.build("imagefolder", str(tmp_path), "train")
    test = datasets.build("imagefolder", str(tmp_path), "test")  # test/ (no val/)
    assert train.classes == ["cat", "ship"] and [y for _, y in train.samples] == [0, 1]
    assert [test[i][1] for i in range(2)] == [0, 1]
    pil = np.asarray(Image.open(tmp_path / "test/cat/c.jpg").convert("RGB"))
    assert np.abs(chw_to_hwc(test[0][0]).astype(int) - pil.astype(int)).max() <= 1  # libjpeg IDCT


def test_image_list_reads_relative_paths_and_labels(tmp_path):
    imgs = random_images(3, 8, seed=2)
    for i in range(3):
        write_png(tmp_path / "images_classic" / f"x{i}.png", imgs[i])
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "train.txt").write_text(
        "# comment\nimages_classic/x0.png 2\n\nimages_classic/x1.png 0\nimages_classic/x2.png 1\n"
    )
    ds = datasets.build("imagefolder", str(tmp_path), "lists/train.txt")
    assert len(ds) == 3 and datasets.labels(ds) == [2, 0, 1] and ds.classes == ["0", "1", "2"]
    for i in range(3):
        np.testing.assert_array_equal(chw_to_hwc(ds[i][0]), imgs[i])


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("images/x0.png\n", r"train\.txt:1: expected 'relative/path label'"),
        ("images/x0.png zero\n", r"train\.txt:1"),
        ("images/missing.png 0\n", r"1 of the 1 images listed .* do not exist.*missing\.png"),
        ("\n# only a comment\n", "lists no images"),
    ],
)
def test_bad_image_lists_name_the_file(tmp_path, text, match):
    (tmp_path / "train.txt").write_text(text)
    with pytest.raises(imagefiles.DatasetError, match=match):
        datasets.build("imagefolder", str(tmp_path), "train.txt")


def test_layout_errors_name_the_path(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "notes.txt").write_text("no class folders here")
    with pytest.raises(
        imagefiles.DatasetError, match=re.escape(str(tmp_path / "train")) + " has no class"
    ):
        datasets.build("imagefolder", str(tmp_path), "train")
    write_png(tmp_path / "train" / "cat" / "a.png", random_images(1, 8, 0)[0])
    (tmp_path / "train" / "dog").mkdir()
    (tmp_path / "train" / "dog" / "readme.md").write_text("not an image")
    with pytest.raises(imagefiles.DatasetError, match=re.escape(str(tmp_path / "train" / "dog"))):
        datasets.build("imagefolder", str(tmp_path), "train")
    with pytest.raises(DatasetNotFoundError, match=re.escape(str(tmp_path / "test"))):
        datasets.build("imagefolder", str(tmp_path), "test")
    with pytest.raises(DatasetNotFoundError, match=re.escape(str(tmp_path / "nope.txt"))):
        datasets.build("imagefolder", str(tmp_path), "nope.txt")


def test_truncated_and_corrupt_images_raise_naming_the_file(tmp_path):
    img = random_images(1, 32, 3)[0]
    write_truncated_jpeg(tmp_path / "t.jpg", img)
    (tmp_path / "g.png").write_bytes(b"not a png at all")
    (tmp_path / "b.bmp").write_bytes(b"BM broken")
    for name in ("t.jpg", "g.png", "b.bmp"):
        with pytest.raises(imagefiles.BadImageError, match=re.escape(str(tmp_path / name))):
            imagefiles.read_image(tmp_path / name)


def _folder_with_bad_files(root, n=12, bad=(3, 4, 11)):
    imgs = random_images(n, 8, 5)
    for i in range(n):
        path = root / "train" / "c" / f"{i:02d}.png"
        if i in bad:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"corrupt")
        else:
            write_png(path, imgs[i])
    return imgs


def test_skip_bad_images_substitutes_the_next_and_counts_in_workers(tmp_path):
    imgs = _folder_with_bad_files(tmp_path)
    counter = imagefiles.skip_counter()
    ds = datasets.build("imagefolder", str(tmp_path), "train", skip_bad=counter)
    np.testing.assert_array_equal(chw_to_hwc(ds[3][0]), imgs[5])  # 3, 4 bad -> 5
    np.testing.assert_array_equal(chw_to_hwc(ds[11][0]), imgs[0])  # wraps around
    assert int(counter.sum()) == 3  # 3 and 4 for item 3, 11 for item 11
    counter.zero_()
    loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=lambda b: len(b))
    assert sum(loader) == 12
    assert int(counter.sum()) == 4 and int(counter[0]) == 0  # 3 (x2), 4, 11: in worker slots
    plain = datasets.build("imagefolder", str(tmp_path), "train")
    with pytest.raises(imagefiles.BadImageError, match="03.png"):
        plain[3]


def test_stratified_subset_per_class_and_fraction_with_the_seed(tmp_path):
    for c, n in (("a", 10), ("b", 6)):
        for i in range(n):
            write_png(tmp_path / "train" / c / f"{i}.png", random_images(1, 4, i)[0])
    ds = datasets.build("imagefolder", str(tmp_path), "train")
    three = datasets.stratified_subset(ds, 3, seed=0)
    assert sorted(datasets.labels(three)) == [0, 0, 0, 1, 1, 1]
    half = datasets.stratified_subset(ds, 0.5, seed=0)
    assert sorted(datasets.labels(half)) == [0] * 5 + [1] * 3
    again = datasets.stratified_subset(ds, 3, seed=0)
    other = [datasets.stratified_subset(ds, 3, seed=s).indices for s in range(1, 6)]
    assert three.indices == again.indices and any(o != three.indices for o in other)
    assert three.indices == sorted(three.indices)
    assert datasets.labels(three) == [datasets.labels(ds)[i] for i in three.indices]


def test_loader_workers_never_exceed_the_ranks_cores(monkeypatch):
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda _: {0, 1}, raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert cores.available() == 2 and cores.loader_workers(8) == 1 and cores.loader_workers(0) == 0
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert cores.per_rank() == 1 and cores.loader_workers(8) == 0
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda _: set(range(32)), raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert cores.per_rank() == 8 and cores.loader_workers(8) == 7 and cores.loader_workers(4) == 4


# --- valid images that crashed training, written in their true format ------


def write_png16_rgb(path, hwc16: np.ndarray) -> None:
    """A 16-bit-per-channel RGB PNG (colour type 2, bit depth 16; PIL cannot write one), encoded
    by hand after the PNG specification: big-endian samples, filter type 0 on every row."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    h, w, _ = hwc16.shape
    rows = b"".join(b"\x00" + hwc16[y].astype(">u2").tobytes() for y in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )  # fmt: skip


def random_u16(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 65536, shape, dtype=np.uint16)


def test_16_bit_png_decodes_to_8_bits_by_the_top_byte(tmp_path):
    rgb = random_u16((6, 7, 3), 0)
    write_png16_rgb(tmp_path / "rgb16.png", rgb)
    assert Image.open(tmp_path / "rgb16.png").mode in ("RGB;16", "RGB", "I;16")  # PIL parses it
    gray = random_u16((5, 4), 1)
    Image.fromarray(gray).save(tmp_path / "gray16.png")  # PIL writes I;16 as a 16-bit PNG
    Image.fromarray(gray).save(tmp_path / "gray16.tif")  # 16-bit TIFF: the PIL path
    cases = [("rgb16.png", rgb), ("gray16.png", gray), ("gray16.tif", gray)]
    for name, pixels in cases:
        got = imagefiles.read_image(tmp_path / name)
        expected = (pixels >> 8).astype(np.uint8)
        expected = np.repeat(expected[..., None], 3, 2) if expected.ndim == 2 else expected
        assert got.dtype == torch.uint8 and got.shape == (3, *pixels.shape[:2]), name
        np.testing.assert_array_equal(chw_to_hwc(got), expected, err_msg=name)


def test_animated_gif_named_jpg_decodes_its_first_frame(tmp_path):
    frames = random_images(3, 10, 7)
    pil = [Image.fromarray(f).quantize(colors=256, method=Image.Quantize.MEDIANCUT) for f in frames]
    pil[0].save(tmp_path / "anim.jpg", format="GIF", save_all=True, append_images=pil[1:])
    assert Image.open(tmp_path / "anim.jpg").n_frames == 3
    expected = np.asarray(Image.open(tmp_path / "anim.jpg").convert("RGB"))  # PIL: frame 0
    got = imagefiles.read_image(tmp_path / "anim.jpg")
    assert got.dtype == torch.uint8 and got.shape == (3, 10, 10)
    np.testing.assert_array_equal(chw_to_hwc(got), expected)
    assert np.abs(expected.astype(int) - frames[0].astype(int)).mean() < 40  # it is frame 0


def test_such_images_train_in_a_batch_with_ordinary_ones(tmp_path):
    write_png(tmp_path / "train" / "a" / "0.png", random_images(1, 8, 0)[0])
    write_png16_rgb(tmp_path / "train" / "a" / "1.png", random_u16((8, 8, 3), 2))
    frames = [Image.fromarray(f) for f in random_images(2, 8, 3)]
    (tmp_path / "train" / "b").mkdir()
    frames[0].save(tmp_path / "train" / "b" / "2.jpg", format="GIF", save_all=True,
                   append_images=frames[1:])  # fmt: skip
    ds = datasets.build("imagefolder", str(tmp_path), "train")
    batch = next(iter(DataLoader(ds, batch_size=3)))
    assert batch[0].shape == (3, 3, 8, 8) and batch[0].dtype == torch.uint8


@pytest.mark.parametrize("name", ["empty.png", "empty.jpg", "empty.bmp"])
def test_a_zero_byte_image_is_called_empty(tmp_path, name):
    (tmp_path / name).write_bytes(b"")
    for read in (imagefiles.read_image, imagefiles.read_pil):
        with pytest.raises(imagefiles.BadImageError) as info:
            read(tmp_path / name)
        assert (
            str(info.value) == f"cannot read image {tmp_path / name}: the file is empty (0 bytes)"
        )
        assert_documented(str(info.value))
