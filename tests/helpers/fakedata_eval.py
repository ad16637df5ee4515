"""Tiny evaluation datasets written in their true on-disk formats (the file names, list files and
.mat/.json/.npy layouts torchvision and CIFAR-10-C use), for loading through the real readers.

Each writer returns what a reader must give back: ``{split: [(pixels HWC uint8, label), ...]}`` in
the reader's order, plus class names where the format stores them. JPEG sets use single-colour
images (JPEG keeps a flat colour to within a few levels) of varied sizes, so pixels and sizes can
both be checked.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.io as sio
from PIL import Image

from pretrain.testing.fakedata import random_images, write_png

CINIC_CLASSES = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
]
Item = tuple[np.ndarray, int]


def flat_image(i: int, h: int, w: int) -> np.ndarray:
    """An (h, w, 3) image of one colour that differs for every i."""
    colour = np.array([(40 * i + 20) % 256, (90 * i + 60) % 256, (150 - 30 * i) % 256], np.uint8)
    return np.broadcast_to(colour, (h, w, 3)).copy()


def write_jpeg(path: Path, hwc: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(hwc).save(path, quality=95)


def write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines))


class _Counter:
    """Hands out distinct flat images of growing sizes."""

    def __init__(self) -> None:
        self.i = 0

    def next(self) -> np.ndarray:
        self.i += 1
        return flat_image(self.i, 10 + 3 * self.i, 14 + 2 * self.i)


def write_cinic10(root: Path, seed: int = 0) -> dict[str, list[Item]]:
    """``root/cinic10/{train,valid,test}/<class>/*.png``: one 32-px image per class and split, two
    for train's first class (ImageFolder order: class, then file name)."""
    out: dict[str, list[Item]] = {}
    for s, split in enumerate(("train", "valid", "test")):
        imgs = iter(random_images(11, 32, seed + s))
        items: list[Item] = []
        for c, name in enumerate(CINIC_CLASSES):
            files = (
                ["cifar10-train-7.png", "n02690373_16.png"] if (split, c) == ("train", 0) else []
            )
            for f in files or [f"n0000000{c}_{s}.png"]:
                img = next(imgs)
                write_png(root / "cinic10" / split / name / f, img)
                items.append((img, c))
        out[split] = items
    return out


def write_svhn(root: Path, seed: int = 0) -> dict[str, list[Item]]:
    """``root/svhn/{train,test}_32x32.mat``: X (32, 32, 3, N) uint8, y (N, 1), 10 for digit 0."""
    out: dict[str, list[Item]] = {}
    for split, digits in (("train", [10, 1, 2, 9, 10]), ("test", [3, 10, 7])):
        imgs = random_images(len(digits), 32, seed + len(digits))
        y = np.array(digits, dtype=np.uint8).reshape(-1, 1)
        path = root / "svhn" / f"{split}_32x32.mat"
        path.parent.mkdir(parents=True, exist_ok=True)
        sio.savemat(path, {"X": imgs.transpose(1, 2, 3, 0), "y": y})
        out[split] = [(imgs[i], d % 10) for i, d in enumerate(digits)]
    return out


def write_pets(root: Path) -> dict:
    """``root/oxford-iiit-pet/{images/<Breed_n>.jpg, annotations/{trainval,test}.txt}``; list lines
    are ``<image id> <class id 1..37> <species 1 cat / 2 dog> <breed id in species>``."""
    breeds = {
        "Abyssinian": (1, 1, 1),
        "american_bulldog": (2, 2, 1),
        "american_pit_bull_terrier": (3, 2, 2),
    }
    splits = {
        "trainval": [
            "Abyssinian_1",
            "american_bulldog_1",
            "american_pit_bull_terrier_1",
            "Abyssinian_2",
        ],
        "test": ["Abyssinian_3", "american_bulldog_2", "american_pit_bull_terrier_2"],
    }
    folder, gen, out = root / "oxford-iiit-pet", _Counter(), {}
    for split, ids in splits.items():
        lines, items = [], []
        for image_id in ids:
            cls, species, breed = breeds[image_id.rsplit("_", 1)[0]]
            img = gen.next()
            write_jpeg(folder / "images" / f"{image_id}.jpg", img)
            lines.append(f"{image_id} {cls} {species} {breed}")
            items.append((img, cls - 1))
        write_lines(folder / "annotations" / f"{split}.txt", lines)
        out[split] = items
    (folder / "annotations" / "trimaps").mkdir(exist_ok=True)
    out["classes"] = ["Abyssinian", "American Bulldog", "American Pit Bull Terrier"]
    return out


def write_dtd(root: Path) -> dict:
    """``root/dtd/dtd/{images/<class>/<class>_NNNN.jpg, labels/{train,val,test}1.txt}``."""
    classes = ["banded", "blotchy", "braided"]
    folder, gen, out = root / "dtd" / "dtd", _Counter(), {"classes": classes}
    for split, picks in (("train", [0, 1, 2, 0]), ("val", [2, 1, 0]), ("test", [1, 0, 2])):
        lines, items = [], []
        for c in picks:
            img = gen.next()
            rel = f"{classes[c]}/{classes[c]}_{gen.i:04d}.jpg"
            write_jpeg(folder / "images" / rel, img)
            lines.append(rel)
            items.append((img, c))
        write_lines(folder / "labels" / f"{split}1.txt", lines)
        out[split] = items
    return out


def write_aircraft(root: Path) -> dict:
    """``root/fgvc-aircraft-2013b/data/{variants.txt, images/<id>.jpg,
    images_variant_{train,val,trainval,test}.txt}`` (list lines: ``<id> <variant name>``)."""
    classes = ["707-320", "A320", "Cessna 172"]
    data, gen, out = root / "fgvc-aircraft-2013b" / "data", _Counter(), {"classes": classes}
    write_lines(data / "variants.txt", classes)
    for split, picks in (("train", [2, 0, 1]), ("val", [1, 2]), ("test", [0, 2, 1])):
        lines, items = [], []
        for c in picks:
            img, image_id = gen.next(), f"{1025794 + gen.i:07d}"
            write_jpeg(data / "images" / f"{image_id}.jpg", img)
            lines.append(f"{image_id} {classes[c]}")
            items.append((img, c))
        write_lines(data / f"images_variant_{split}.txt", lines)
        out[split] = items
    out["trainval"] = out["train"] + out["val"]
    lines = (data / "images_variant_train.txt").read_text() + (
        data / "images_variant_val.txt"
    ).read_text()
    (data / "images_variant_trainval.txt").write_text(lines)
    return out


def write_food101(root: Path) -> dict:
    """``root/food-101/{meta/{train,test}.json, meta/classes.txt, images/<class>/<id>.jpg}``; the
    json maps each class to ``["<class>/<id>", ...]``."""
    classes = ["apple_pie", "baby_back_ribs", "churros"]
    folder, gen, out = root / "food-101", _Counter(), {"classes": classes}
    write_lines(folder / "meta" / "classes.txt", classes)
    for split, counts in (("train", [2, 1, 2]), ("test", [1, 2, 1])):
        meta, items = {}, []
        for c, name in enumerate(classes):
            meta[name] = []
            for _ in range(counts[c]):
                img = gen.next()
                rel = f"{name}/{100000 + gen.i}"
                write_jpeg(folder / "images" / f"{rel}.jpg", img)
                meta[name].append(rel)
                items.append((img, c))
        (folder / "meta" / f"{split}.json").write_text(json.dumps(meta))
        out[split] = items
    return out


def write_flowers102(root: Path) -> dict:
    """``root/flowers-102/{jpg/image_NNNNN.jpg, imagelabels.mat, setid.mat}``: ``labels`` (1, N)
    1-based; setid ``trnid``/``valid``/``tstid`` (1, n) image numbers (1-based)."""
    labels = [1, 102, 5, 1, 77, 3, 102]
    setid = {"trnid": [2, 1], "valid": [4, 3], "tstid": [7, 5, 6]}
    folder, gen = root / "flowers-102", _Counter()
    imgs = [gen.next() for _ in labels]
    for i, img in enumerate(imgs, 1):
        write_jpeg(folder / "jpg" / f"image_{i:05d}.jpg", img)
    sio.savemat(folder / "imagelabels.mat", {"labels": np.array([labels], dtype=np.uint8)})
    sio.savemat(folder / "setid.mat", {k: np.array([v], dtype=np.uint16) for k, v in setid.items()})
    out = {
        split: [(imgs[i - 1], labels[i - 1] - 1) for i in setid[key]]
        for split, key in (("train", "trnid"), ("val", "valid"), ("test", "tstid"))
    }
    out["trainval"] = out["train"] + out["val"]
    return out


def _cars_annotations(items: list[tuple[int, str]]) -> np.ndarray:
    fields = ["bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "fname"]
    ann = np.zeros((1, len(items)), dtype=[(f, "O") for f in fields])
    for j, (cls, fname) in enumerate(items):
        ann[0, j] = (np.uint8(1), np.uint8(1), np.uint8(9), np.uint8(9), np.uint8(cls), fname)
    return ann


def write_cars(root: Path) -> dict:
    """``root/stanford_cars/{devkit/{cars_meta.mat, cars_train_annos.mat}, cars_train/,
    cars_test_annos_withlabels.mat, cars_test/}``: ``annotations`` (1, N) structs with bbox, 1-based
    ``class`` and ``fname``; ``class_names`` a (1, C) cell array."""
    classes = ["AM General Hummer SUV 2000", "Acura RL Sedan 2012", "Volvo 240 Sedan 1993"]
    folder, gen, out = root / "stanford_cars", _Counter(), {"classes": classes}
    names = np.empty((1, len(classes)), dtype=object)
    names[0, :] = classes
    (folder / "devkit").mkdir(parents=True)
    sio.savemat(folder / "devkit" / "cars_meta.mat", {"class_names": names})
    annos = {"train": "devkit/cars_train_annos.mat", "test": "cars_test_annos_withlabels.mat"}
    for split, picks in (("train", [3, 1, 2]), ("test", [2, 3])):
        rows, items = [], []
        for j, cls in enumerate(picks, 1):
            img, fname = gen.next(), f"{j:05d}.jpg"
            write_jpeg(folder / f"cars_{split}" / fname, img)
            rows.append((cls, fname))
            items.append((img, cls - 1))
        sio.savemat(folder / annos[split], {"annotations": _cars_annotations(rows)})
        out[split] = items
    return out


def write_image_tree(folder: Path, rel_paths: list[str], seed: int = 0) -> list[np.ndarray]:
    """Random images at ``folder/<rel path>`` (PNG lossless, so pixels compare exactly; sizes vary);
    returns them in sorted relative-path order, the OOD reader's order."""
    rng = np.random.default_rng(seed)
    written = {}
    for k, rel in enumerate(rel_paths):
        img = rng.integers(0, 256, (8 + k, 12 + 2 * k, 3), dtype=np.uint8)
        write_png(folder / rel, img)
        written[rel] = img
    return [written[rel] for rel in sorted(written)]


def write_cifar_c(
    root: Path, corruption: str, per_severity: int = 4, seed: int = 0, folder: str = "CIFAR-10-C"
) -> tuple[np.ndarray, np.ndarray]:
    """``root/<folder>/{<corruption>.npy, labels.npy}``: (5n, 32, 32, 3) uint8 images, severity s
    at rows (s-1)n:sn, and (5n,) uint8 labels (the test labels repeated per severity)."""
    n = per_severity
    images = random_images(5 * n, 32, seed)
    labels = np.tile(np.arange(n, dtype=np.uint8) % 10, 5)
    (root / folder).mkdir(parents=True, exist_ok=True)
    np.save(root / folder / f"{corruption}.npy", images)
    np.save(root / folder / "labels.npy", labels)
    return images, labels
