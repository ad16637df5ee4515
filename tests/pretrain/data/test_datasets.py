"""Dataset readers on tiny files written in each dataset's true on-disk format."""

from __future__ import annotations

import hashlib
import re
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from sklearn.datasets import load_digits

from pretrain.data import datasets
from pretrain.data.datasets import DatasetNotFoundError
from pretrain.testing.fakedata import cifar_rows, dump, random_images, write_png
from tests.helpers import fakedata_eval


@pytest.fixture
def cifar10_root(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    train = random_images(10, 32, seed=0)
    train_labels = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    for i in range(5):
        part = slice(2 * i, 2 * i + 2)
        dump(
            {
                "data": cifar_rows(train[part]),
                "labels": train_labels[part],
                "batch_label": f"training batch {i + 1} of 5",
            },
            folder / f"data_batch_{i + 1}",
        )
    test = random_images(3, 32, seed=1)
    dump({"data": cifar_rows(test), "labels": [7, 0, 8]}, folder / "test_batch")
    names = fakedata_eval.CINIC_CLASSES  # CIFAR-10's class names, in its order
    dump({"label_names": names, "num_cases_per_batch": 2, "num_vis": 3072}, folder / "batches.meta")
    return tmp_path, train, train_labels, test, [7, 0, 8], names


def test_cifar10_pixels_labels_and_classes(cifar10_root):
    root, train, train_labels, test, test_labels, names = cifar10_root
    ds = datasets.build("cifar10", str(root), "train")
    assert len(ds) == 10
    assert ds.classes == names
    for i in range(10):
        image, label = ds[i]
        assert isinstance(image, Image.Image)
        np.testing.assert_array_equal(np.asarray(image), train[i])
        assert label == train_labels[i]
    assert datasets.labels(ds) == train_labels
    assert datasets.num_classes(ds) == 10
    ds_test = datasets.build("cifar10", str(root), "test")
    assert len(ds_test) == 3
    for i in range(3):
        image, label = ds_test[i]
        np.testing.assert_array_equal(np.asarray(image), test[i])
        assert label == test_labels[i]


def test_cifar100_fine_labels(tmp_path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    train, test = random_images(4, 32, seed=2), random_images(2, 32, seed=3)
    dump(
        {
            "data": cifar_rows(train),
            "fine_labels": [99, 0, 42, 7],
            "coarse_labels": [19, 4, 1, 0],
            "filenames": ["a", "b", "c", "d"],
        },
        folder / "train",
    )
    dump(
        {"data": cifar_rows(test), "fine_labels": [5, 6], "coarse_labels": [1, 2]}, folder / "test"
    )
    fine = [f"class_{i:02d}" for i in range(100)]
    dump(
        {"fine_label_names": fine, "coarse_label_names": [f"super_{i}" for i in range(20)]},
        folder / "meta",
    )
    ds = datasets.build("cifar100", str(tmp_path), "train")
    assert ds.classes == fine
    assert [ds[i][1] for i in range(4)] == [99, 0, 42, 7]
    for i in range(4):
        np.testing.assert_array_equal(np.asarray(ds[i][0]), train[i])
    ds_test = datasets.build("cifar100", str(tmp_path), "test")
    assert [ds_test[i][1] for i in range(2)] == [5, 6]
    np.testing.assert_array_equal(np.asarray(ds_test[1][0]), test[1])


def write_stl10_images(path: Path, hwc: np.ndarray) -> None:
    # STL-10 stores each channel column-major: per image (3, W, H) (torchvision reads
    # reshape(-1, 3, 96, 96) then swaps the last two axes).
    hwc.transpose(0, 3, 2, 1).astype(np.uint8).tofile(path)


def test_stl10_binary_layout(tmp_path):
    folder = tmp_path / "stl10_binary"
    folder.mkdir()
    train, test, unlabeled = (random_images(n, 96, seed=s) for n, s in ((2, 4), (2, 5), (1, 6)))
    write_stl10_images(folder / "train_X.bin", train)
    np.array([1, 10], dtype=np.uint8).tofile(folder / "train_y.bin")  # 1-based on disk
    write_stl10_images(folder / "test_X.bin", test)
    np.array([3, 7], dtype=np.uint8).tofile(folder / "test_y.bin")
    write_stl10_images(folder / "unlabeled_X.bin", unlabeled)
    names = ["airplane", "bird", "car", "cat", "deer", "dog", "horse", "monkey", "ship", "truck"]
    (folder / "class_names.txt").write_text("\n".join(names) + "\n")

    ds = datasets.build("stl10", str(tmp_path), "train")
    assert len(ds) == 2
    assert ds.classes == names
    assert [ds[i][1] for i in range(2)] == [0, 9]
    for i in range(2):
        np.testing.assert_array_equal(np.asarray(ds[i][0]), train[i])

    ds_test = datasets.build("stl10", str(tmp_path), "test")
    assert [ds_test[i][1] for i in range(2)] == [2, 6]
    np.testing.assert_array_equal(np.asarray(ds_test[0][0]), test[0])

    both = datasets.build("stl10", str(tmp_path), "train+unlabeled")
    assert len(both) == 3
    assert datasets.labels(both) == [0, 9, -1]
    np.testing.assert_array_equal(np.asarray(both[2][0]), unlabeled[0])


def test_imagefolder_classes_and_pixels(tmp_path):
    imgs = random_images(5, 6, seed=7)
    layout = [
        ("train/dog/a.png", 0),
        ("train/cat/b.png", 1),
        ("train/cat/c.png", 2),
        ("val/cat/d.png", 3),
        ("val/dog/e.png", 4),
    ]
    for rel, i in layout:
        write_png(tmp_path / rel, imgs[i])
    ds = datasets.build("imagefolder", str(tmp_path), "train")
    assert ds.classes == ["cat", "dog"]  # sorted folder names
    # ImageFolder orders samples by class, then by file name: cat/b, cat/c, dog/a.
    expected = [(imgs[1], 0), (imgs[2], 0), (imgs[0], 1)]
    assert len(ds) == 3
    for i, (pixels, label) in enumerate(expected):
        image, got = ds[i]  # uint8 (3, H, W) tensors, decoded by torchvision.io
        np.testing.assert_array_equal(image.permute(1, 2, 0).numpy(), pixels)
        assert got == label
    val = datasets.build("imagefolder", str(tmp_path), "test")  # no test/: reads val/
    assert [val[i][1] for i in range(2)] == [0, 1]
    np.testing.assert_array_equal(val[0][0].permute(1, 2, 0).numpy(), imgs[3])


def test_imagenet100_classes_list():
    wnids = datasets.imagenet100_classes()
    assert len(wnids) == 100
    assert len(set(wnids)) == 100
    assert wnids[:3] == ["n02869837", "n01749939", "n02488291"]
    assert all(re.fullmatch(r"n\d{8}", w) for w in wnids)
    text = (
        Path(datasets.__file__).parents[1] / "resources" / "imagenet100_classes.txt"
    ).read_bytes()
    assert hashlib.sha256(text).hexdigest() == datasets.IMAGENET100_SHA256


@pytest.fixture
def imagenet100_root(tmp_path):
    wnids = datasets.imagenet100_classes()
    pixel = np.zeros((2, 2, 3), dtype=np.uint8)
    for i, wnid in enumerate(wnids):
        pixel[...] = i
        write_png(tmp_path / "train" / wnid / f"{wnid}_0.png", pixel)
    extra = tmp_path / "train" / "n99999999"
    write_png(extra / "x.png", np.full((2, 2, 3), 255, dtype=np.uint8))
    return tmp_path, wnids


def test_imagenet100_uses_the_100_classes_in_sorted_order(imagenet100_root):
    root, wnids = imagenet100_root
    ds = datasets.build("imagenet100", str(root), "train")
    assert ds.classes == sorted(wnids)
    assert len(ds) == 100  # the image of the extra folder is ignored
    assert all("n99999999" not in path for path, _ in ds.samples)
    for i, wnid in enumerate(sorted(wnids)):
        image, label = ds[i]
        assert label == i
        assert int(np.asarray(image)[0, 0, 0]) == wnids.index(wnid)


def test_imagenet100_missing_class_is_named(imagenet100_root):
    root, wnids = imagenet100_root
    gone = wnids[17]
    shutil.rmtree(root / "train" / gone)
    with pytest.raises(DatasetNotFoundError, match=rf"1 of the 100 .*{gone}"):
        datasets.build("imagenet100", str(root), "train")


@pytest.mark.parametrize(
    "name, expected",
    [
        ("cifar10", "cifar-10-batches-py"),
        ("cifar100", "cifar-100-python"),
        ("stl10", "stl10_binary"),
        ("imagefolder", "train"),
        ("imagenet100", "train"),
    ],
)
def test_missing_dataset_names_the_path(tmp_path, name, expected):
    with pytest.raises(DatasetNotFoundError, match=re.escape(str(tmp_path / expected))):
        datasets.build(name, str(tmp_path), "train")


def test_missing_val_folder_names_the_path(tmp_path):
    (tmp_path / "train" / "a").mkdir(parents=True)
    with pytest.raises(DatasetNotFoundError, match=re.escape(str(tmp_path / "val"))):
        datasets.build("imagefolder", str(tmp_path), "test")


def test_partial_cifar_is_reported_missing(cifar10_root):
    root = cifar10_root[0]
    (root / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DatasetNotFoundError, match="data_batch_3"):
        datasets.build("cifar10", str(root), "train")


def test_unknown_dataset_name():
    with pytest.raises(ValueError, match="unknown dataset 'mnist'"):
        datasets.build("mnist", "data", "train")


def np_upsample_8_to_16(x: np.ndarray) -> np.ndarray:
    """Bilinear 8 -> 16 with half-pixel centres (align_corners=False), edges clamped."""
    src = np.maximum((np.arange(16) + 0.5) / 2.0 - 0.5, 0.0)
    i0 = np.floor(src).astype(int)
    i1 = np.minimum(i0 + 1, 7)
    w = src - i0
    rows = x[:, i0, :] * (1 - w)[None, :, None] + x[:, i1, :] * w[None, :, None]
    return rows[:, :, i0] * (1 - w)[None, None, :] + rows[:, :, i1] * w[None, None, :]


def test_digits_split_shapes_and_pixels():
    train = datasets.build("digits", "ignored", "train")
    test = datasets.build("digits", "ignored", "test")
    assert (len(train), len(test)) == (1437, 360)
    image, label = train[0]
    assert tuple(image.shape) == (3, 16, 16)
    assert image.dtype == torch.uint8
    assert datasets.num_classes(train) == 10 and train.classes == [str(c) for c in range(10)]
    assert set(datasets.labels(test)) == set(range(10))
    # Every image has three equal channels.
    data = train.data.numpy()
    assert (data[:, 0] == data[:, 1]).all() and (data[:, 0] == data[:, 2]).all()

    # Train and test partition the 1,797 digits: as multisets of (pixels, label) their union is
    # the whole set, upsampled independently here.
    x, y = load_digits(return_X_y=True)
    ref = np.round(np.clip(np_upsample_8_to_16(x.reshape(-1, 8, 8) / 16.0), 0, 1) * 255)
    everything = Counter((ref[i].astype(np.uint8).tobytes(), int(y[i])) for i in range(len(y)))
    ours = Counter()
    for ds in (train, test):
        imgs = ds.data[:, 0].numpy()
        ours.update((imgs[i].tobytes(), ds.targets[i]) for i in range(len(ds)))
    assert ours == everything


def test_digits_split_is_fixed_across_calls():
    a = datasets.build("digits", "x", "train")
    b = datasets.build("digits", "y", "train")
    assert a.targets == b.targets
    assert np.array_equal(a.data.numpy(), b.data.numpy())
