"""Evaluation dataset readers on tiny files written in each dataset's true on-disk format."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import datasets as tvd

from linear_eval.inputs.eval_datasets import EVAL_DATASETS, build_eval_dataset, transfer_transform
from pretrain.data.datasets import DatasetNotFoundError
from pretrain.testing.fakedata import write_cifar10
from tests.helpers.fakedata_eval import (
    CINIC_CLASSES,
    flat_image,
    write_aircraft,
    write_cars,
    write_cinic10,
    write_dtd,
    write_flowers102,
    write_food101,
    write_image_tree,
    write_pets,
    write_svhn,
)

JPEG_TOL = 4  # flat colours survive JPEG at quality 95 to within a few levels


def assert_items(ds, expected, tol: int = 0) -> None:
    """Length, labels (also as ``targets``, read without decoding), image sizes and pixels."""
    assert len(ds) == len(expected)
    assert [int(y) for y in ds.targets] == [label for _, label in expected]
    for i, (pixels, label) in enumerate(expected):
        image, got = ds[i]
        assert isinstance(image, Image.Image) and image.mode == "RGB"
        assert image.size == (pixels.shape[1], pixels.shape[0])  # PIL size is (W, H)
        diff = np.abs(np.asarray(image).astype(int) - pixels.astype(int)).max()
        assert diff <= tol, f"item {i}: pixels differ by {diff}"
        assert got == label


# name, writer, splits to read, JPEG tolerance (0: lossless formats)
LABELLED = [
    ("cinic10", write_cinic10, {"train": "train", "val": "valid", "test": "test"}, 0),
    ("svhn", write_svhn, {"train": "train", "test": "test"}, 0),
    ("pets", write_pets, {"train": "trainval", "test": "test"}, JPEG_TOL),
    ("dtd", write_dtd, {"train": "train", "val": "val", "test": "test"}, JPEG_TOL),
    ("aircraft", write_aircraft, {s: s for s in ("train", "val", "trainval", "test")}, JPEG_TOL),
    ("food101", write_food101, {"train": "train", "test": "test"}, JPEG_TOL),
    (
        "flowers102",
        write_flowers102,
        {s: s for s in ("train", "val", "trainval", "test")},
        JPEG_TOL,
    ),
    ("cars", write_cars, {"train": "train", "test": "test"}, JPEG_TOL),
]


@pytest.mark.parametrize("name, writer, splits, tol", LABELLED, ids=[c[0] for c in LABELLED])
def test_labelled_sets_read_back(tmp_path, name, writer, splits, tol):
    written = writer(tmp_path)
    for split, key in splits.items():
        ds = build_eval_dataset(name, str(tmp_path), split)
        assert_items(ds, written[key], tol)
        if "classes" in written:
            assert ds.classes == written["classes"]


@pytest.mark.parametrize(
    "name, writer, tol", [("cinic10", write_cinic10, 0), ("dtd", write_dtd, JPEG_TOL)]
)
def test_trainval_is_train_then_val(tmp_path, name, writer, tol):
    written = writer(tmp_path)
    val_key = "valid" if name == "cinic10" else "val"
    ds = build_eval_dataset(name, str(tmp_path), "trainval")
    assert_items(ds, written["train"] + written[val_key], tol)
    assert ds.classes == build_eval_dataset(name, str(tmp_path), "train").classes


def test_cinic10_classes_are_the_cifar_order(tmp_path):
    write_cinic10(tmp_path)
    assert build_eval_dataset("cinic10", str(tmp_path), "test").classes == CINIC_CLASSES


def test_no_val_split_means_trainval_is_train(tmp_path):
    written = write_svhn(tmp_path)
    assert_items(build_eval_dataset("svhn", str(tmp_path), "trainval"), written["train"])
    with pytest.raises(ValueError, match="svhn has no 'val' split"):
        build_eval_dataset("svhn", str(tmp_path), "val")


def test_cifar10_delegates_to_pretrain_reader(tmp_path):
    written = write_cifar10(tmp_path, per_batch=2, test=3)
    train = build_eval_dataset("cifar10", str(tmp_path), "trainval")
    assert_items(train, list(zip(written["train"], written["train_y"])))
    test = build_eval_dataset("cifar10", str(tmp_path), "test")
    assert_items(test, list(zip(written["test"], written["test_y"])))


def test_torchvision_md5_would_reject_the_small_files(tmp_path):
    """Why the presence-only subclasses exist: upstream md5 checks refuse true-format test files."""
    write_svhn(tmp_path)
    write_flowers102(tmp_path)
    with pytest.raises(RuntimeError, match="corrupted"):
        tvd.SVHN(str(tmp_path / "svhn"), split="train", download=False)
    with pytest.raises(RuntimeError, match="corrupted"):
        tvd.Flowers102(str(tmp_path), split="train", download=False)


OOD = ["lsun", "lsun_resize", "isun", "places365", "textures"]


@pytest.mark.parametrize("name", OOD)
def test_ood_folders_any_depth_unlabelled(tmp_path, name):
    rels = ["b/img2.png", "a.png", "b/c/img1.jpeg", "b/img10.PNG"]
    expected = write_image_tree(tmp_path / name, rels, seed=3)
    (tmp_path / name / "b" / "notes.txt").write_text("not an image")
    (tmp_path / name / "b" / "._img2.png").write_bytes(b"macOS resource fork")
    ds = build_eval_dataset(name, str(tmp_path), "test")
    lossy = (
        1  # sorted order: a.png, b/c/img1.jpeg (JPEG noise: sizes only), b/img10.PNG, b/img2.png
    )
    assert len(ds) == 4
    assert ds.targets == [-1] * 4
    for i, pixels in enumerate(expected):
        image, label = ds[i]
        assert label == -1 and image.size == (pixels.shape[1], pixels.shape[0])
        if i != lossy:
            np.testing.assert_array_equal(np.asarray(image), pixels)
    rel = [p.relative_to(tmp_path / name).as_posix() for p in ds.files]
    assert rel == sorted(rels)


def test_textures_falls_back_to_the_dtd_images(tmp_path):
    write_dtd(tmp_path)
    ds = build_eval_dataset("textures", str(tmp_path), "test")
    assert len(ds) == 10  # every DTD image, all splits
    assert set(ds.targets) == {-1}


def test_imagefolder_prefix_reads_any_folder(tmp_path):
    expected = write_image_tree(tmp_path / "mine", ["x/1.png", "0.png"], seed=4)
    ds = build_eval_dataset(f"imagefolder:{tmp_path / 'mine'}", "unused", "test")
    assert len(ds) == 2
    for i, pixels in enumerate(expected):
        np.testing.assert_array_equal(np.asarray(ds[i][0]), pixels)
        assert ds[i][1] == -1


# folder:<path>, labelled ImageFolder splits; written class order is not sorted on purpose
TRAIN_RELS = ["owl/b.png", "owl/a.png", "ant/x.png", "cat/2.png", "cat/1.png", "cat/3.png"]
TEST_RELS = ["owl/9.png", "cat/z.png", "cat/y.png"]  # no ant: a subset of the train classes
CLASSES = ["ant", "cat", "owl"]  # sorted train class folders


def write_split(root, split: str, rels: list[str], seed: int) -> list[tuple[np.ndarray, int]]:
    """PNGs at root/split/<class>/<file>; (pixels, label) in ImageFolder's order (sorted class
    folders, then sorted files), label = the class folder's index in CLASSES."""
    images = write_image_tree(root / split, rels, seed)
    return [(img, CLASSES.index(rel.split("/")[0])) for img, rel in zip(images, sorted(rels))]


def test_folder_prefix_reads_labelled_splits(tmp_path):
    train = write_split(tmp_path, "train", TRAIN_RELS, seed=5)
    test = write_split(tmp_path, "test", TEST_RELS, seed=6)
    (tmp_path / "train" / "cat" / "._1.png").write_bytes(b"macOS resource fork")
    (tmp_path / "train" / "cat" / "notes.txt").write_text("not an image")
    name = f"folder:{tmp_path}"
    for split, expected in (("train", train), ("trainval", train), ("test", test)):
        ds = build_eval_dataset(name, "unused", split)
        assert_items(ds, expected)
        assert ds.classes == CLASSES
    assert [y for _, y in test] == [1, 1, 2]  # train's indices, not those of test's own folders
    with pytest.raises(ValueError, match="no 'val' split"):
        build_eval_dataset(name, "unused", "val")
    ood = build_eval_dataset(f"imagefolder:{tmp_path}", "unused", "test")  # stays unlabelled
    assert len(ood) == len(TRAIN_RELS) + len(TEST_RELS) and set(ood.targets) == {-1}


def test_folder_val_is_the_test_split_when_test_is_absent(tmp_path):
    train = write_split(tmp_path, "train", TRAIN_RELS, seed=5)
    val = write_split(tmp_path, "val", TEST_RELS, seed=7)
    name = f"folder:{tmp_path}"
    assert_items(build_eval_dataset(name, "unused", "test"), val)
    assert_items(build_eval_dataset(name, "unused", "trainval"), train)
    with pytest.raises(ValueError, match="no 'val' split"):
        build_eval_dataset(name, "unused", "val")


def test_folder_with_val_and_test_has_a_validation_split(tmp_path):
    train = write_split(tmp_path, "train", TRAIN_RELS, seed=5)
    val = write_split(tmp_path, "val", ["owl/v.png", "ant/v.png"], seed=7)
    test = write_split(tmp_path, "test", TEST_RELS, seed=6)
    name = f"folder:{tmp_path}"
    assert_items(build_eval_dataset(name, "unused", "val"), val)
    assert_items(build_eval_dataset(name, "unused", "test"), test)
    both = build_eval_dataset(name, "unused", "trainval")
    assert_items(both, train + val)
    assert both.classes == CLASSES


def test_folder_problems_name_the_path_and_layout(tmp_path):
    gone = tmp_path / "nope"
    with pytest.raises(DatasetNotFoundError) as info:
        build_eval_dataset(f"folder:{gone}", "unused", "train")
    for part in (f"not found at {gone}", f"{gone}/train/<class>/<image>", f"{gone}/test/<class>"):
        assert part in str(info.value)
    write_split(tmp_path, "train", TRAIN_RELS, seed=5)
    name = f"folder:{tmp_path}"
    with pytest.raises(DatasetNotFoundError, match=re.escape(f"class folders in {tmp_path}/test")):
        build_eval_dataset(name, "unused", "train")  # no test/ nor val/
    write_image_tree(tmp_path / "test", ["bee/1.png", "ant/1.png"], seed=6)
    with pytest.raises(ValueError, match=re.escape("class folders ['bee']")):
        build_eval_dataset(name, "unused", "test")
    (tmp_path / "test" / "bee" / "1.png").unlink()
    (tmp_path / "test" / "bee").rmdir()
    (tmp_path / "train" / "dog").mkdir()  # a train class without images
    with pytest.raises(DatasetNotFoundError, match=re.escape("no images of ['dog']")):
        build_eval_dataset(name, "unused", "train")
    with pytest.raises(ValueError, match="names no folder"):
        build_eval_dataset("folder:", "unused", "train")


def test_empty_ood_folder_is_reported(tmp_path):
    (tmp_path / "isun" / "sub").mkdir(parents=True)
    with pytest.raises(DatasetNotFoundError, match=re.escape(f"under {tmp_path / 'isun'}")):
        build_eval_dataset("isun", str(tmp_path), "test")


# name -> the path the error must name, relative to root
MISSING = {
    "cifar10": "cifar-10-batches-py",
    "cifar100": "cifar-100-python",
    "stl10": "stl10_binary",
    "cinic10": "cinic10",
    "svhn": "svhn",
    "pets": "oxford-iiit-pet",
    "dtd": "dtd/dtd",
    "aircraft": "fgvc-aircraft-2013b/data",
    "food101": "food-101",
    "flowers102": "flowers-102",
    "cars": "stanford_cars",
    "lsun": "lsun",
    "lsun_resize": "lsun_resize",
    "isun": "isun",
    "places365": "places365",
    "textures": "textures",
}


def test_every_name_has_a_missing_case():
    assert set(MISSING) == set(EVAL_DATASETS)


@pytest.mark.parametrize("name", sorted(MISSING))
def test_missing_dataset_names_the_path(tmp_path, name):
    with pytest.raises(DatasetNotFoundError, match=re.escape(str(tmp_path / MISSING[name]))):
        build_eval_dataset(name, str(tmp_path), "test")


def test_missing_imagefolder_names_the_path(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=re.escape(str(tmp_path / "nope"))):
        build_eval_dataset(f"imagefolder:{tmp_path / 'nope'}", "unused", "test")


@pytest.mark.parametrize(
    "name, writer, gone",
    [
        ("dtd", write_dtd, "dtd/dtd/labels/val1.txt"),
        ("pets", write_pets, "oxford-iiit-pet/annotations/test.txt"),
        ("aircraft", write_aircraft, "fgvc-aircraft-2013b/data/images_variant_test.txt"),
        ("food101", write_food101, "food-101/meta/test.json"),
        ("flowers102", write_flowers102, "flowers-102/setid.mat"),
        ("cars", write_cars, "stanford_cars/cars_test_annos_withlabels.mat"),
        ("svhn", write_svhn, "svhn/test_32x32.mat"),
    ],
)
def test_missing_list_file_is_named(tmp_path, name, writer, gone):
    writer(tmp_path)
    (tmp_path / gone).unlink()
    split = "val" if gone.endswith("val1.txt") else "test"
    with pytest.raises(DatasetNotFoundError, match=re.escape(str(tmp_path / gone))):
        build_eval_dataset(name, str(tmp_path), split)


def test_bad_names_and_splits():
    with pytest.raises(ValueError, match="unknown evaluation dataset 'mnist'"):
        build_eval_dataset("mnist", "data", "test")
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        build_eval_dataset("dtd", "data", "dev")


MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.mark.parametrize(
    "name, size, in_hw",
    [
        ("cifar10", 224, (32, 32)),
        ("cifar100", 224, (32, 32)),
        ("cinic10", 224, (32, 32)),
        ("svhn", 224, (32, 32)),
        ("stl10", 96, (96, 96)),
        ("pets", 224, (300, 500)),
        ("dtd", 224, (640, 480)),
        ("aircraft", 224, (700, 1000)),
        ("food101", 224, (512, 384)),
        ("flowers102", 224, (500, 667)),
        ("cars", 224, (240, 360)),
        ("folder:/any/labelled/folder", 224, (300, 500)),
    ],
)
def test_transfer_transform_sizes_and_normalisation(name, size, in_hw):
    image = Image.fromarray(flat_image(3, *in_hw))
    out = transfer_transform(name, MEAN, STD)(image)
    assert out.shape == (3, size, size) and out.dtype == torch.float32
    colour = flat_image(3, 1, 1)[0, 0] / 255.0  # a flat image stays flat under resize and crop
    want = (colour - np.array(MEAN)) / np.array(STD)
    np.testing.assert_allclose(
        out.numpy(), np.broadcast_to(want[:, None, None], out.shape), atol=1e-5
    )


@pytest.mark.parametrize("name", ["pets", "folder:/any/labelled/folder"])
def test_fine_grained_resize_then_crop_keeps_the_centre(name):
    """Resize short side to 256, then crop 224: a 256x512 image keeps columns 144..368 of 512."""
    hwc = np.zeros((256, 512, 3), np.uint8)
    hwc[:, 144:368] = 255  # exactly the centre crop
    out = transfer_transform(name, (0.0,) * 3, (1.0,) * 3)(Image.fromarray(hwc))
    assert out.shape == (3, 224, 224)
    assert out.min() > 0.99  # nothing from outside the centre 224 columns


@pytest.mark.parametrize("name", ["lsun", "imagefolder:/any/folder"])
def test_ood_sets_have_no_transfer_transform(name):
    with pytest.raises(ValueError, match="in-distribution"):
        transfer_transform(name, MEAN, STD)


def test_registry_notes_are_one_line():
    for name, spec in EVAL_DATASETS.items():
        assert spec.note and "\n" not in spec.note, name
