"""Class folders read as a careful user expects: every split labelled by the training
split's class names, symbolic links followed without ever entering a folder twice, and unreadable
folders and files named with the permission problem. Folders are written as PNGs in their true
format; the expected labels come from the class folder each file was written into."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

from pretrain import build, config
from pretrain.data import datasets, imagefiles, pipeline
from pretrain.testing.fakedata import random_images, write_png
from tests.helpers.folders import TRAIN, deny, labels_by_folder, write_split


def run_data(root: Path, *extra: str) -> pipeline.Data:
    """The pretraining datasets and loaders of an imagefolder run on ``root``."""
    cfg = config.load(
        "digits_moco.yaml",
        ["data.name=imagefolder", f"data.root={root}", "data.image_size=8", "data.eval_resize=8",
         "model.width=8", "train.batch_size=4", "moco.queue_size=4", "data.num_workers=0",
         *extra],
    )  # fmt: skip
    return build.datasets_for(cfg)


# --- splits labelled by the training split's class names -------------------------------


def test_test_split_without_a_class_keeps_the_training_labels(tmp_path, capsys):
    write_split(tmp_path, "train", TRAIN)
    write_split(tmp_path, "test", {"cat": 2, "owl": 1}, seed=1)  # no ant
    got = run_data(tmp_path)
    test = got.test_loader.dataset.base
    classes = sorted(TRAIN)
    assert test.classes == classes and got.num_classes == 3
    pairs = labels_by_folder(test)
    assert [y for _, y in pairs] == [classes.index(c) for c, _ in pairs] == [1, 1, 2]
    assert [test[i][1] for i in range(len(test))] == [1, 1, 2]
    err = capsys.readouterr().err
    warning = (
        f"warning: {tmp_path / 'test'} has no images of 1 of the 3 training classes (ant); its "
        "images keep the training split's labels, and its accuracy covers the other classes"
    )
    assert err.count(warning) == 1, err


def test_a_test_class_unknown_to_training_is_an_error_naming_it(tmp_path):
    write_split(tmp_path, "train", TRAIN)
    write_split(tmp_path, "test", {"bee": 1, "cat": 1}, seed=1)
    message = (
        f"{tmp_path / 'test'}: class folder(s) bee are not among the 3 classes of the training "
        "split, so they have no label: remove them or add them to the training split"
    )
    with pytest.raises(imagefiles.DatasetError, match=re.escape(message)):
        run_data(tmp_path)


def test_a_test_image_list_beyond_the_training_labels_is_an_error(tmp_path):
    imgs = random_images(5, 8, 0)
    for i in range(5):
        write_png(tmp_path / "img" / f"{i}.png", imgs[i])
    (tmp_path / "train.txt").write_text("".join(f"img/{i}.png {i % 2}\n" for i in range(4)))
    (tmp_path / "test.txt").write_text("img/4.png 2\n")
    with pytest.raises(
        imagefiles.DatasetError,
        match=re.escape(f"{tmp_path / 'test.txt'}: label(s) 2 are not classes of the training"),
    ):
        run_data(tmp_path, "data.train_split=train.txt", "data.test_split=test.txt")


# --- symbolic links followed without entering a folder twice ---------------------------


def test_a_link_to_the_split_folder_is_reported_once_and_not_followed(tmp_path, capsys):
    write_split(tmp_path, "train", TRAIN)
    link = tmp_path / "train" / "cat" / "up"
    link.symlink_to(tmp_path / "train", target_is_directory=True)  # a loop
    (tmp_path / "train" / "owl" / "root").symlink_to(tmp_path, target_is_directory=True)
    samples, classes = imagefiles.scan_folder(tmp_path / "train")
    assert len(samples) == sum(TRAIN.values())
    assert all(Path(p).parent.name == classes[y] for p, y in samples)
    err = capsys.readouterr().err
    assert err.count("warning:") == 1, err
    assert f"{link} -> {tmp_path / 'train'}" in err
    assert f"{tmp_path / 'train' / 'owl' / 'root'} -> {tmp_path}" in err


def test_a_link_to_another_class_does_not_relabel_its_images(tmp_path, capsys):
    write_split(tmp_path, "train", TRAIN)
    (tmp_path / "train" / "ant" / "cats").symlink_to(tmp_path / "train" / "cat")
    samples, classes = imagefiles.scan_folder(tmp_path / "train")
    assert sorted(Path(p).parent.name for p, y in samples if classes[y] == "ant") == ["ant"] * 2
    assert sum(1 for _, y in samples if classes[y] == "cat") == 3
    assert "ant/cats -> " in capsys.readouterr().err


def test_a_link_to_a_folder_elsewhere_is_followed(tmp_path, capsys):
    write_split(tmp_path, "train", TRAIN)
    write_split(tmp_path, "extra", {"more": 4}, seed=2)
    (tmp_path / "train" / "owl" / "more").symlink_to(tmp_path / "extra" / "more")
    samples, classes = imagefiles.scan_folder(tmp_path / "train")
    owls = [p for p, y in samples if classes[y] == "owl"]
    assert len(owls) == 2 + 4 and capsys.readouterr().err == ""


# --- unreadable folders and files named with the permission problem ------------


def test_an_unreadable_class_folder_is_named_as_unreadable_not_empty(tmp_path, monkeypatch):
    write_split(tmp_path, "train", TRAIN)
    deny(monkeypatch, tmp_path / "train" / "cat")
    message = (
        f"cannot list folder {tmp_path / 'train' / 'cat'}: permission denied; give the user "
        "running negmine read and execute rights on it (chmod a+rx)"
    )
    with pytest.raises(imagefiles.DatasetError, match=re.escape(message)):
        imagefiles.scan_folder(tmp_path / "train")


def test_an_unreadable_image_is_named_as_unreadable(tmp_path, monkeypatch):
    write_split(tmp_path, "train", TRAIN)
    path = tmp_path / "train" / "cat" / "1.png"
    ds = datasets.build("imagefolder", str(tmp_path), "train")
    deny(monkeypatch, path)
    message = (
        f"cannot read image {path}: permission denied; give the user running negmine read "
        "rights on it (chmod a+r)"
    )
    with pytest.raises(imagefiles.BadImageError, match=re.escape(message)):
        ds[3]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_chmod_000_as_a_user(tmp_path):
    write_split(tmp_path, "train", TRAIN)
    (tmp_path / "train" / "cat" / "1.png").chmod(0)
    with pytest.raises(imagefiles.BadImageError, match="permission denied"):
        imagefiles.read_image(tmp_path / "train" / "cat" / "1.png")
    (tmp_path / "train" / "owl").chmod(0)
    try:
        with pytest.raises(imagefiles.DatasetError, match="permission denied"):
            imagefiles.scan_folder(tmp_path / "train")
    finally:
        (tmp_path / "train" / "owl").chmod(0o755)


def test_pixels_of_a_mapped_split_are_those_of_its_files(tmp_path):
    write_split(tmp_path, "train", TRAIN)
    write_split(tmp_path, "test", {"owl": 1}, seed=4)
    test = datasets.build("imagefolder", str(tmp_path), "test", classes=sorted(TRAIN))
    expected = random_images(1, 8, 4)[0]
    np.testing.assert_array_equal(test[0][0].permute(1, 2, 0).numpy(), expected)
    assert test[0][1] == 2
