"""A CIFAR-10/100 file whose contents the unpickler allows but the dataset cannot be is refused as
it is read, naming the file (:mod:`pretrain.data.cifar_files`): ``data`` must be a uint8 array of
N rows of 3072 pixel values, the labels N class numbers below the class count, the meta file's
class names one text per class. Before, a list of lists as ``data`` was stacked into gigabytes,
an object array failed later with a TypeError, and a label past the class count failed only in
the kNN monitor, after a whole epoch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pretrain.data import datasets
from pretrain.data.imagefiles import DatasetError
from pretrain.testing.fakedata import cifar_rows, dump, random_images, write_cifar10
from tests.helpers.inproc import pretrain
from tests.helpers.troubleshooting_quotes import assert_documented

HEADING = "A CIFAR batch or meta file is refused"
FOLDER = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}
ROWS = cifar_rows(random_images(4, 32, seed=5))


def write_cifar100(root: Path) -> None:
    """``root/cifar-100-python/`` (train, test, meta) in the download's layout."""
    folder = root / FOLDER["cifar100"]
    for name in ("train", "test"):
        dump({"data": ROWS, "fine_labels": [99, 0, 42, 7], "coarse_labels": [19, 4, 1, 0]},
             folder / name)  # fmt: skip
    fine = [f"class_{i:02d}" for i in range(100)]
    dump({"fine_label_names": fine, "coarse_label_names": [f"s{i}" for i in range(20)]},
         folder / "meta")  # fmt: skip


# name: (dataset, file, split, the file's contents, why it is refused)
BAD = {
    "list of lists": (
        "cifar10", "data_batch_1", "train",
        {"data": [[0] * 1000] * 1000, "labels": [0] * 1000},  # 1,000 references to one list
        "its 'data' is a list of 1000, not a (N, 3072) array of uint8",
    ),
    "object array": (
        "cifar10", "data_batch_2", "train",
        {"data": ROWS.astype(object), "labels": [0, 1, 2, 3]},
        "it asks for a numpy dtype of 'O8', which a data file has no use for (only arrays of "
        "booleans, integers and floats are read); it was not built",
    ),
    "label 99 of 10 classes": (
        "cifar10", "data_batch_3", "train", {"data": ROWS, "labels": [99, 0, 1, 2]},
        "its 'labels' hold 99 at index 0, not a class number in [0, 10)",
    ),
    "rows of 3071": (
        "cifar10", "data_batch_1", "train", {"data": ROWS[:, :3071], "labels": [0, 1, 2, 3]},
        "its 'data' is a (4, 3071) array of uint8, not a (N, 3072) array of uint8",
    ),
    "3 labels for 4 rows": (
        "cifar10", "data_batch_5", "train", {"data": ROWS, "labels": [0, 1, 2]},
        "it has 4 rows of 'data' but 3 'labels'",
    ),
    "float data": (
        "cifar10", "data_batch_1", "train",
        {"data": ROWS.astype(np.float64), "labels": [0, 1, 2, 3]},
        "its 'data' is a (4, 3072) array of float64, not a (N, 3072) array of uint8",
    ),
    "no labels": (
        "cifar10", "data_batch_1", "train", {"data": ROWS, "fine_labels": [0, 1, 2, 3]},
        "it has no 'labels' entry",
    ),
    "labels an array": (
        "cifar10", "data_batch_1", "train", {"data": ROWS, "labels": np.arange(4)},
        "its 'labels' is a (4,) array of int64, not a list of 4 class numbers",
    ),
    "a negative label in test_batch": (
        "cifar10", "test_batch", "test", {"data": ROWS, "labels": [0, 1, -1, 3]},
        "its 'labels' hold -1 at index 2, not a class number in [0, 10)",
    ),
    "CIFAR-100 fine label 100": (
        "cifar100", "train", "train", {"data": ROWS, "fine_labels": [0, 100, 1, 2]},
        "its 'fine_labels' hold 100 at index 1, not a class number in [0, 100)",
    ),
    "CIFAR-100 test rows of 3071": (
        "cifar100", "test", "test", {"data": ROWS[:, 1:], "fine_labels": [0, 1, 2, 3]},
        "its 'data' is a (4, 3071) array of uint8, not a (N, 3072) array of uint8",
    ),
}  # fmt: skip
BAD_META = {
    "9 class names": (
        "cifar10", "batches.meta", {"label_names": [f"c{i}" for i in range(9)]},
        "its 'label_names' is a list of 9, not a list of 10 class names",
    ),
    "names as bytes": (
        "cifar10", "batches.meta", {"label_names": [f"c{i}".encode() for i in range(10)]},
        "its 'label_names' is a list holding a bytes, not a list of 10 class names",
    ),
    "CIFAR-100 without fine_label_names": (
        "cifar100", "meta", {"label_names": [f"c{i}" for i in range(100)]},
        "it has no 'fine_label_names' entry",
    ),
}  # fmt: skip


def write_root(root: Path, dataset: str, per_batch: int = 4) -> Path:
    if dataset == "cifar10":
        write_cifar10(root, per_batch=per_batch, test=4)
    else:
        write_cifar100(root)
    return root / FOLDER[dataset]


def refused(path: Path, what: str, why: str) -> str:
    return (
        f"{path} is not a CIFAR {what} file ({why}); replace it with the file of the dataset's "
        "download"
    )


@pytest.mark.parametrize("name", list(BAD))
def test_a_batch_the_dataset_cannot_be_is_refused_as_it_is_read(tmp_path, name):
    dataset, file, split, contents, why = BAD[name]
    path = write_root(tmp_path, dataset) / file
    dump(contents, path)
    with pytest.raises(DatasetError) as info:
        datasets.build(dataset, str(tmp_path), split)
    assert str(info.value) == refused(path, "batch", why)
    assert_documented(str(info.value), HEADING)


@pytest.mark.parametrize("name", list(BAD_META))
def test_a_meta_file_without_the_class_names_is_refused(tmp_path, name):
    dataset, file, contents, why = BAD_META[name]
    path = write_root(tmp_path, dataset) / file
    dump(contents, path)
    with pytest.raises(DatasetError) as info:
        datasets.build(dataset, str(tmp_path), "train")
    assert str(info.value) == refused(path, "meta", why)
    assert_documented(str(info.value), HEADING)


@pytest.mark.parametrize("name", ["list of lists", "label 99 of 10 classes"])
def test_the_command_line_refuses_a_bad_batch_before_any_step(tmp_path, name):
    """Exit 2 naming the file, and no step taken (no checkpoint, no metrics); before, the list of
    lists ended in a traceback and label 99 after one epoch, in the kNN monitor."""
    dataset, file, _, contents, why = BAD[name]
    path = write_root(tmp_path / "data", dataset, per_batch=16) / file
    dump(contents, path)
    run, root = tmp_path / "run", tmp_path / "data"
    done = pretrain("--cfg", "cifar10_moco.yaml", f"data.root={root}", f"out_dir={run}",
                    "model.arch=resnet_small", "model.width=8", "train.epochs=1",
                    "train.batch_size=16", "moco.queue_size=16", "data.num_workers=0",
                    "train.progress_bar=false")  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == f"error: {refused(path, 'batch', why)}"
    assert not (run / "checkpoints").exists() and not (run / "metrics.jsonl").exists()
