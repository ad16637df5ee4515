"""Dataset readers: scikit-learn digits (embedded), CIFAR-10/100, STL-10, ImageFolder, ImageNet-100.

Every reader returns ``(image, label)``, the image a PIL image or a uint8 ``tv_tensors.Image``,
and never downloads: a missing dataset raises :class:`DatasetNotFoundError` naming the expected path
and layout. The torchvision readers are used as they are, except that file presence is checked
instead of the upstream md5 sums (hashing 160 MB at every start buys nothing on a cluster where the
files do not change, and it lets the tests load files they write in the true format), and that the
CIFAR pickles are read by :class:`pickles.DataUnpickler`, which builds numpy arrays of plain
numbers, lists, dicts, text and numbers and nothing else (a crafted batch file can neither run code
nor forge pointers), and their contents checked by :mod:`cifar_files` before any is used.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, Subset
from torchvision import datasets as tvd
from torchvision import tv_tensors

from pretrain.data import cifar_files, imagefiles
from pretrain.data.pickles import read_pickle

RESOURCES = Path(__file__).parents[1] / "resources"
# sha256 of the CMC ImageNet-100 list (HobbitLong/CMC imagenet100.txt, the order solo-learn ships).
IMAGENET100_SHA256 = "79f3f1552ccc478ce24bd934b4573625db584ddc1f4643ae23c994a94cb11397"
DIGITS_TEST_FRACTION = 0.2  # fixed stratified split: 1,437 train / 360 test images
DIGITS_SIZE = 16  # 8x8 digits upsampled (bilinear) to 16x16


class DatasetNotFoundError(FileNotFoundError):
    """The dataset is not where the config says; the message says where and how to get it."""


def missing_dataset(name: str, path: Path | str, layout: str, how: str) -> DatasetNotFoundError:
    return DatasetNotFoundError(
        f"{name} not found at {path}.\nExpected layout:\n{layout}\nHow to get it: {how}\n"
        "(negmine never downloads at run time; point at the data with data.root=PATH, or with "
        "--data-root PATH for python -m linear_eval.)"
    )


class Digits(Dataset):
    """scikit-learn's bundled 8x8 digits as 3-channel uint8 images of 16x16, fixed split."""

    def __init__(self, train: bool = True) -> None:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        x, y = load_digits(return_X_y=True)
        idx_train, idx_test = train_test_split(
            range(len(y)), test_size=DIGITS_TEST_FRACTION, random_state=0, stratify=y
        )
        idx = idx_train if train else idx_test
        img = torch.as_tensor(x[idx], dtype=torch.float32).view(-1, 1, 8, 8) / 16.0
        img = F.interpolate(img, size=DIGITS_SIZE, mode="bilinear", align_corners=False)
        self.data = (
            (img.clamp(0, 1) * 255).round().to(torch.uint8).expand(-1, 3, -1, -1).contiguous()
        )
        self.targets = [int(v) for v in y[idx]]
        self.classes = [str(c) for c in range(10)]

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        return tv_tensors.Image(self.data[i]), self.targets[i]


def _presence_only(files: list[tuple[str, str]]) -> list[tuple[str, None]]:
    return [(name, None) for name, _ in files]


class _SafeCIFAR:
    """torchvision's CIFAR reading (``__init__`` and ``_load_meta`` as upstream) with the files
    read by :func:`pickles.read_pickle` instead of ``pickle.load`` and their contents checked
    (:mod:`cifar_files`) before any is used: the meta file first (its class names, one per
    class of ``n_classes``), then each batch (its labels below ``n_classes``)."""

    base_folder: str
    train_list: list[tuple[str, None]]
    test_list: list[tuple[str, None]]
    meta: dict[str, Any]
    labels_key: str  # the batches' labels: CIFAR-10's "labels", CIFAR-100's "fine_labels"
    n_classes: int

    def __init__(self, root: str, train: bool = True) -> None:
        tvd.VisionDataset.__init__(self, root)  # type: ignore[arg-type]
        self.train = train
        folder = Path(self.root) / self.base_folder
        self._load_meta()
        data, self.targets = [], []
        for name, _ in self.train_list if train else self.test_list:
            path = folder / name
            entry = read_pickle(path, "CIFAR batch")
            rows, labels = cifar_files.batch(entry, path, self.labels_key, self.n_classes)
            data.append(rows)
            self.targets.extend(labels)
        self.data = np.vstack(data).reshape(-1, 3, 32, 32).transpose((0, 2, 3, 1))

    def _load_meta(self) -> None:
        path = Path(self.root) / self.base_folder / self.meta["filename"]
        meta = read_pickle(path, "CIFAR meta")
        self.classes = cifar_files.class_names(meta, path, self.meta["key"], self.n_classes)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}


class CIFAR10(_SafeCIFAR, tvd.CIFAR10):
    train_list = _presence_only(tvd.CIFAR10.train_list)
    test_list = _presence_only(tvd.CIFAR10.test_list)
    meta = {**tvd.CIFAR10.meta, "md5": None}
    labels_key, n_classes = "labels", 10


class CIFAR100(_SafeCIFAR, tvd.CIFAR100):
    train_list = _presence_only(tvd.CIFAR100.train_list)
    test_list = _presence_only(tvd.CIFAR100.test_list)
    meta = {**tvd.CIFAR100.meta, "md5": None}
    labels_key, n_classes = "fine_labels", 100


class STL10(tvd.STL10):
    train_list = _presence_only(tvd.STL10.train_list)
    test_list = _presence_only(tvd.STL10.test_list)


def imagenet100_classes() -> list[str]:
    """The CMC ImageNet-100 class list shipped with the package, checked against its sha256."""
    path = RESOURCES / "imagenet100_classes.txt"
    text = path.read_bytes()
    if hashlib.sha256(text).hexdigest() != IMAGENET100_SHA256:
        raise RuntimeError(f"{path} does not match the CMC ImageNet-100 list (sha256 differs)")
    return text.decode().split()


class ClassSubsetFolder(tvd.ImageFolder):
    """An ImageFolder restricted to a fixed list of classes (indices in sorted wnid order); images
    decoded by :func:`imagefiles.read_image` (uint8 tensors, errors name the file)."""

    def __init__(self, root: str, classes: list[str], **kwargs: Any) -> None:
        self._wanted = sorted(classes)
        super().__init__(root, loader=imagefiles.read_image, **kwargs)

    def make_dataset(  # type: ignore[override]
        self,
        directory: str | Path,
        class_to_idx: dict[str, int],
        extensions: tuple[str, ...] | None = None,
        is_valid_file: Any = None,
        allow_empty: bool = False,
    ) -> list[tuple[str, int]]:
        """torchvision's scan, with symbolic links followed without entering a folder twice."""
        return imagefiles.folder_samples(directory, class_to_idx, imagefiles.is_image, allow_empty)

    def find_classes(self, directory: str | Path) -> tuple[list[str], dict[str, int]]:
        missing = [c for c in self._wanted if not (Path(directory) / c).is_dir()]
        if missing:
            raise DatasetNotFoundError(
                f"{len(missing)} of the {len(self._wanted)} ImageNet-100 classes are missing under "
                f"{directory} (first: {', '.join(missing[:5])}). Each class is a folder named by "
                "its WordNet id holding that class's JPEGs (ILSVRC-2012 train/val layout)."
            )
        return self._wanted, {c: i for i, c in enumerate(self._wanted)}


def build(
    name: str,
    root: str,
    split: str,
    *,
    skip_bad: torch.Tensor | None = None,
    classes: list[str] | None = None,
) -> Dataset:
    """Read dataset ``name`` under ``root``; ``split`` is train, test (val) or train+unlabeled.

    For ``imagefolder``/``imagenet100`` the split is a folder under ``root`` (``test`` reads
    ``test/`` or else ``val/``, ``val`` the reverse) or an image-list file (``*.txt``, lines
    ``relative/path label`` relative to ``root``). ``classes``: for ``imagefolder``, the class
    names of the training split, which label this split's class folders by name (list labels
    index them); see :func:`imagefiles.scan_folder`. ``skip_bad``: a counter from
    :func:`imagefiles.skip_counter` to replace unreadable images (and count them) instead of
    raising :class:`imagefiles.BadImageError`.
    """
    ds = _build(name, root, split, classes)
    return ds if skip_bad is None else imagefiles.SkipBadImages(ds, skip_bad)


def _build(name: str, root: str, split: str, classes: list[str] | None = None) -> Dataset:
    base = Path(root).expanduser()
    train = split != "test"
    if name == "digits":
        return Digits(train=train)
    if name in ("cifar10", "cifar100"):
        cls, folder = (
            (CIFAR10, "cifar-10-batches-py")
            if name == "cifar10"
            else (CIFAR100, "cifar-100-python")
        )
        files = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
        if not all((base / folder / f).is_file() for f in files):
            raise missing_dataset(
                name.upper(),
                base / folder,
                f"  {base / folder}/{{{', '.join(files)}}}  (the python pickle batches)",
                f"download the 'python version' tarball from https://www.cs.toronto.edu/~kriz/cifar.html"
                f" and extract it in {base}",
            )
        return cls(str(base), train=train)
    if name == "stl10":
        folder = base / "stl10_binary"
        need = ["train_X.bin", "train_y.bin", "test_X.bin", "test_y.bin", "unlabeled_X.bin"]
        missing = [f for f in need if not (folder / f).is_file()]
        if missing:
            raise missing_dataset(
                "STL-10",
                folder,
                f"  {folder}/{{{', '.join(need)}, class_names.txt}}",
                f"download stl10_binary.tar.gz from https://cs.stanford.edu/~acoates/stl10/ and "
                f"extract it in {base}",
            )
        return STL10(str(base), split=split if split != "val" else "test", download=False)
    if name in ("imagefolder", "imagenet100"):
        return _image_files(name, base, split, classes)
    raise ValueError(f"unknown dataset {name!r}")


def num_classes(ds: Dataset) -> int:
    classes = getattr(ds, "classes", None)
    if classes is not None:
        return len(classes)
    return int(max(labels(ds))) + 1


def labels(ds: Dataset) -> list[int]:
    """Labels without decoding images (unlabeled STL-10 images carry -1)."""
    for attr in ("targets", "labels"):
        value = getattr(ds, attr, None)
        if value is not None:
            return [int(v) for v in value]
    return [int(ds[i][1]) for i in range(len(ds))]


class ClassSubset(Subset):
    """The images of ``classes`` only (one-class or subset training); labels and the class list
    stay those of the full dataset, so class indices keep their meaning."""

    def __init__(self, ds: Dataset, classes: list[int]) -> None:
        all_labels = labels(ds)
        total = num_classes(ds)
        bad = [c for c in classes if not 0 <= c < total]
        if bad:
            raise ValueError(f"classes {bad} do not exist: the dataset has classes 0..{total - 1}")
        wanted = set(classes)
        keep = [i for i, y in enumerate(all_labels) if y in wanted]
        super().__init__(ds, keep)
        self.targets = [all_labels[i] for i in keep]
        self.classes = list(getattr(ds, "classes", None) or range(total))


def _image_files(name: str, base: Path, split: str, classes: list[str] | None) -> Dataset:
    """``imagefolder``/``imagenet100``: a class-folder split or an image-list file, labelled by
    the training split's ``classes`` when given (ImageNet-100's are fixed)."""
    title = "ImageNet-100" if name == "imagenet100" else "ImageFolder dataset"
    if split.endswith(".txt"):
        list_file = Path(split) if Path(split).is_absolute() else base / split
        if not list_file.is_file():
            raise missing_dataset(
                title,
                list_file,
                "  lines 'relative/path label', paths relative to data.root",
                f"write the list, or point data.train_split/data.test_split at it (root {base})",
            )
        if name == "imagenet100":
            raise imagefiles.DatasetError("imagenet100 reads class folders, not image lists")
        return imagefiles.ImageFiles(*imagefiles.read_list(list_file, base, classes))
    alternatives = {"test": ("test", "val"), "val": ("val", "test")}.get(split, (split,))
    folder = next((base / s for s in alternatives if (base / s).is_dir()), base / split)
    if not folder.is_dir():
        raise missing_dataset(
            title,
            " or ".join(str(base / s) for s in alternatives),
            f"  {base}/train/<class>/<image> and {base}/{{val or test}}/<class>/<image>"
            " (or data.train_split/data.test_split naming other folders or image-list files)",
            "for ImageNet-100 use the ILSVRC-2012 train and val images of the 100 CMC classes "
            "(pretrain/resources/imagenet100_classes.txt), val sorted into class folders; for "
            "CIFAR-10 as JPEGs, a copy with train/<class>/*.jpg and test/<class>/*.jpg works as is",
        )
    if name == "imagenet100":
        return ClassSubsetFolder(str(folder), imagenet100_classes())
    return imagefiles.ImageFiles(*imagefiles.scan_folder(folder, classes))


def stratified_subset(ds: Dataset, amount: float, seed: int) -> Subset:
    """``data.subset``: ``amount`` images of each class (amount >= 1) or that fraction of each
    class (0 < amount < 1, at least one image), drawn with ``seed``; order kept."""
    y = torch.as_tensor(labels(ds))
    g = torch.Generator().manual_seed(seed)
    keep = []
    for c in torch.unique(y).tolist():
        members = torch.nonzero(y == c).flatten()
        k = int(amount) if amount >= 1 else max(1, round(amount * len(members)))
        keep.append(members[torch.randperm(len(members), generator=g)[:k]])
    chosen = torch.cat(keep).sort().values.tolist()
    sub = Subset(ds, chosen)
    sub.targets = [int(y[i]) for i in chosen]  # type: ignore[attr-defined]
    sub.classes = list(getattr(ds, "classes", None) or range(num_classes(ds)))  # type: ignore
    return sub
