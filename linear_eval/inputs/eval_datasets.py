"""Every dataset the evaluators read (transfer probes and OOD sets), offline only.

``build_eval_dataset(name, root, split)`` returns ``(image, label)`` items, the image a PIL RGB
image (for CIFAR/STL, what the :mod:`pretrain.data.datasets` reader returns: also PIL). Nothing is
ever downloaded (``download=False`` always): a missing dataset raises
:class:`pretrain.data.datasets.DatasetNotFoundError` naming the exact path expected and how to get
it.

Splits: ``train`` and ``test`` are the official lists; ``val`` is the official validation list
(DTD, FGVC-Aircraft, Flowers-102, CINIC-10 only); ``trainval`` is train ∪ val, the set the
fixed-feature transfer protocol of Kornblith et al. 2019 (arXiv:1805.08974) fits the final probe on
after choosing hyper-parameters on val, and equals ``train`` where no validation list exists.
Oxford-IIIT Pets ships a single training list, ``trainval.txt``, so its ``train`` is that list.
The OOD image folders have no splits and accept any of the four.

Prefixed names read a folder by path (absolute or from the current directory; ``root`` unused):
``imagefolder:<path>``, every image under it, unlabelled (OOD); ``folder:<path>``, torchvision's
ImageFolder layout ``<path>/{train,val,test}/<class>/<image>`` (transfer), labelled by the sorted
class folders of ``train/``, which the other splits may subset (a training class without images
in a split is reported once; a class folder training lacks is an error). Without ``test/``,
``val/`` is the test split (ImageNet-style folders ship train and val only), and ``trainval`` is
``train``.

What the torchvision constructors check on disk (torchvision 0.2x, read in site-packages):

- SVHN: ``check_integrity`` md5 of ``<split>_32x32.mat``. Flowers102: md5 of ``imagelabels.mat``
  and ``setid.mat`` plus the ``jpg/`` folder. Both are subclassed below with the md5 set to
  ``None``, which ``check_integrity`` reads as "the file exists" (the rule pretrain/data/datasets.py
  applies to CIFAR): hashing at every start buys nothing on files that do not change, and it is
  what lets the tests load small files written in the true format.
- OxfordIIITPet (``images/``, ``annotations/``), DTD (``dtd/dtd/``), FGVCAircraft
  (``fgvc-aircraft-2013b/``), Food101 (``meta/``, ``images/``), StanfordCars (``devkit/``, the
  split's annotation .mat and image folder): folder existence only, md5 sums are checked in their
  download paths alone, so they are used unchanged. DTD must not be subclassed: it looks for
  ``root/<class name lowercased>/dtd``.
- We check the split's list files as well before constructing (torchvision would otherwise fail
  with a bare ``FileNotFoundError``); single image files are only opened on ``__getitem__``.

NOTE: FGVC-Aircraft images keep their 20-px copyright banner at the bottom (torchvision does not
crop it; some protocols do).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PIL import Image
from torch.utils.data import ConcatDataset, Dataset
from torchvision import datasets as tvd
from torchvision.datasets.folder import IMG_EXTENSIONS
from torchvision.transforms import v2

from pretrain.data import datasets as pretrain_datasets
from pretrain.data import imagefiles
from pretrain.data.datasets import DatasetNotFoundError, missing_dataset
from pretrain.data.loaders import eval_transform

SPLITS = ("train", "val", "trainval", "test")
_NO_VAL = ("train", "trainval", "test")
IMAGEFOLDER_PREFIX = "imagefolder:"  # unlabelled, OOD
FOLDER_PREFIX = "folder:"  # labelled ImageFolder splits, transfer
FOLDER_SIZES = (224, 256)  # image side, resize: the fine-grained sets' recipe


@dataclass(frozen=True)
class EvalSet:
    """One evaluation set: its note, the transfer transform's sizes and the splits it has."""

    note: str  # one line: what it is and where it lives under root
    image_size: int | None  # side fed to the network; None: OOD set, read at the ID set's size
    resize: int | None  # short side before the centre crop
    splits: tuple[str, ...] = _NO_VAL


# Seed protocol resizing: 32-px sets upsampled to 224, STL-10 at its native 96, fine-grained sets
# resize 256 + centre crop 224 (the ImageNet evaluation recipe).
EVAL_DATASETS: dict[str, EvalSet] = {
    "cifar10": EvalSet("CIFAR-10, 10 classes, 32 px: root/cifar-10-batches-py", 224, 224),
    "cifar100": EvalSet("CIFAR-100, 100 classes, 32 px: root/cifar-100-python", 224, 224),
    "cinic10": EvalSet(
        "CINIC-10, CIFAR classes + ImageNet, 32 px: root/cinic10/{train,valid,test}/<class>",
        224,
        224,
        SPLITS,
    ),
    "stl10": EvalSet("STL-10 labelled images, 96 px: root/stl10_binary", 96, 96),
    "svhn": EvalSet("SVHN digits (0 labelled 0), 32 px: root/svhn/*_32x32.mat", 224, 224),
    "pets": EvalSet("Oxford-IIIT Pets, 37 breeds: root/oxford-iiit-pet", 224, 256),
    "dtd": EvalSet("DTD textures, 47 classes, partition 1: root/dtd/dtd", 224, 256, SPLITS),
    "aircraft": EvalSet("FGVC-Aircraft, 100 variants: root/fgvc-aircraft-2013b", 224, 256, SPLITS),
    "food101": EvalSet("Food-101, 101 classes: root/food-101", 224, 256),
    "flowers102": EvalSet("Oxford Flowers-102: root/flowers-102", 224, 256, SPLITS),
    "cars": EvalSet("Stanford Cars, 196 classes: root/stanford_cars", 224, 256),
    "lsun": EvalSet("OOD: LSUN crops (ODIN's LSUN), unlabelled: root/lsun", None, None, SPLITS),
    "lsun_resize": EvalSet(
        "OOD: LSUN resized (ODIN), unlabelled: root/lsun_resize", None, None, SPLITS
    ),
    "isun": EvalSet("OOD: iSUN (ODIN), unlabelled: root/isun", None, None, SPLITS),
    "places365": EvalSet("OOD: Places365 images, unlabelled: root/places365", None, None, SPLITS),
    "textures": EvalSet(
        "OOD: DTD images, unlabelled: root/textures (else root/dtd/dtd/images)", None, None, SPLITS
    ),
}
OOD_HOW = {
    "lsun": "LSUN.tar.gz of ODIN (Liang et al. 2018, github.com/facebookresearch/odin README)",
    "lsun_resize": "LSUN_resize.tar.gz of ODIN (github.com/facebookresearch/odin README)",
    "isun": "iSUN.tar.gz of ODIN (github.com/facebookresearch/odin README)",
    "places365": "the Places365 OOD subset linked from the CIDER/KNN+ READMEs "
    "(github.com/deeplearning-wisc/cider), or torchvision.datasets.Places365(small=True) images",
    "textures": "dtd-r1.0.1.tar.gz of https://www.robots.ox.ac.uk/~vgg/data/dtd/ (its dtd/images) "
    "or torchvision.datasets.DTD(root=ROOT, download=True), whose ROOT/dtd/dtd/images is used",
}


class SVHN(tvd.SVHN):
    """torchvision's SVHN with presence-only file checks (md5 ``None``, see the module note)."""

    split_list = {k: [url, name, None] for k, (url, name, _) in tvd.SVHN.split_list.items()}
    classes = [str(d) for d in range(10)]


class Flowers102(tvd.Flowers102):
    """torchvision's Flowers102 with presence-only checks of its two .mat files."""

    _file_dict = {k: (name, None) for k, (name, _) in tvd.Flowers102._file_dict.items()}


def _visible_image(path: str) -> bool:
    """An image file by extension, not hidden (``._x.jpg`` from macOS tarballs)."""
    name = os.path.basename(path)
    return not name.startswith(".") and name.lower().endswith(IMG_EXTENSIONS)


class ImageFiles(Dataset):
    """Every image file under ``folder`` at any depth, sorted by relative path, label -1.

    Symlinked folders are followed, never into a folder read already (a loop is reported once:
    :class:`pretrain.data.imagefiles.FolderWalk`); hidden files are skipped.
    """

    def __init__(self, folder: Path) -> None:
        walk = imagefiles.FolderWalk(folder)
        found = [Path(f) for f in walk.files(folder, _visible_image)]
        walk.report()
        self.files = sorted(found, key=lambda p: p.relative_to(folder).as_posix())
        self.targets = [-1] * len(self.files)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[Image.Image, int]:
        return imagefiles.read_pil(self.files[i]), -1


class ClassFolder(tvd.ImageFolder):
    """torchvision's ImageFolder over given ``classes`` (a split may lack some), no hidden files,
    symbolic links followed without entering a folder twice."""

    def __init__(self, root: Path, classes: list[str]) -> None:
        self.given = classes
        super().__init__(
            str(root), loader=imagefiles.read_pil, is_valid_file=_visible_image, allow_empty=True
        )

    def find_classes(self, directory: str | Path) -> tuple[list[str], dict[str, int]]:
        return self.given, {c: i for i, c in enumerate(self.given)}

    def make_dataset(  # type: ignore[override]
        self,
        directory: str | Path,
        class_to_idx: dict[str, int],
        extensions: tuple[str, ...] | None = None,
        is_valid_file: Callable[[str], bool] | None = None,
        allow_empty: bool = False,
    ) -> list[tuple[str, int]]:
        return imagefiles.folder_samples(directory, class_to_idx, _visible_image, allow_empty)


def _split_classes(name: str, split: Path, classes: list[str]) -> ClassFolder:
    """``split``'s class folders labelled by the training split's ``classes``: a folder of a class
    training lacks is an error naming it, a training class without images here a warning."""
    extra = sorted(set(_class_dirs(split)) - set(classes))
    if extra:
        raise ValueError(f"{name}: class folders {extra} of {split} are not in train/")
    ds = ClassFolder(split, classes)
    if len(ds) and split.name != "train":  # train/ itself: an empty class is an error (below)
        imagefiles.missing_classes(split, classes, set(ds.targets))
    return ds


def _require(title: str, folder: Path, need: list[Path], how: str) -> None:
    """Raise DatasetNotFoundError listing ``need`` (paths) unless all of them exist."""
    missing = [p for p in need if not p.exists()]
    if missing:
        layout = "\n".join(f"  {p}" for p in need)
        gone = ", ".join(str(p) for p in missing[:3])
        raise missing_dataset(title, folder, f"{layout}\n(missing: {gone})", how)


def _with_targets(ds: Dataset) -> Dataset:
    """Expose ``targets`` (labels without decoding images, as pretrain.data.datasets.labels reads
    them) where torchvision keeps the labels private (``_labels``, StanfordCars' ``_samples``)."""
    if getattr(ds, "targets", None) is None:
        if getattr(ds, "_labels", None) is not None:
            ds.targets = [int(y) for y in ds._labels]  # type: ignore[attr-defined]
        elif getattr(ds, "_samples", None) is not None:
            ds.targets = [int(y) for _, y in ds._samples]  # type: ignore[attr-defined]
        elif getattr(ds, "labels", None) is not None:
            ds.targets = [int(y) for y in ds.labels]  # type: ignore[attr-defined]
    return ds


def _union(parts: list[Dataset]) -> ConcatDataset:
    """train ∪ val, with the class list they share and their labels in order."""
    classes = [getattr(p, "classes", None) for p in parts]
    if any(c != classes[0] for c in classes):
        raise ValueError(f"train and val list different classes: {classes}; cannot take the union")
    union = ConcatDataset([_with_targets(p) for p in parts])
    union.classes = classes[0]  # type: ignore[attr-defined]
    union.targets = [y for p in parts for y in p.targets]  # type: ignore[attr-defined]
    return union


def _tv_how(cls: str, base: Path, extra: str) -> str:
    return f"run torchvision.datasets.{cls}(root='{base}', download=True) once online, or {extra}"


def _cinic10(base: Path, split: str) -> Dataset:
    folder = base / "cinic10"
    subs = {"train": ["train"], "val": ["valid"], "trainval": ["train", "valid"], "test": ["test"]}
    how = (
        "download CINIC-10.tar.gz from https://datashare.ed.ac.uk/handle/10283/3192 and extract "
        f"it into {folder}"
    )
    _require("CINIC-10", folder, [folder / s for s in subs[split]], how)
    _require("CINIC-10", folder, [folder / "train"], how)  # names the classes of every split
    classes = _class_dirs(folder / "train")
    parts = [_split_classes("cinic10", folder / s, classes) for s in subs[split]]
    return parts[0] if len(parts) == 1 else _union(parts)


def _svhn(base: Path, split: str) -> Dataset:
    folder, tv_split = base / "svhn", "test" if split == "test" else "train"
    url = "http://ufldl.stanford.edu/housenumbers"
    how = _tv_how("SVHN", folder, f"fetch {url}/{tv_split}_32x32.mat into {folder}")
    _require("SVHN", folder, [folder / f"{tv_split}_32x32.mat"], how)
    return SVHN(str(folder), split=tv_split, download=False)


def _pets(base: Path, split: str) -> Dataset:
    folder, tv_split = base / "oxford-iiit-pet", "test" if split == "test" else "trainval"
    url = "https://www.robots.ox.ac.uk/~vgg/data/pets/"
    how = _tv_how("OxfordIIITPet", base, f"extract images.tar.gz, annotations.tar.gz of {url}")
    need = [folder / "images", folder / "annotations" / f"{tv_split}.txt"]
    _require("Oxford-IIIT Pets", folder, need, how)
    return tvd.OxfordIIITPet(str(base), split=tv_split, download=False)


def _dtd(base: Path, split: str) -> Dataset:
    folder = base / "dtd" / "dtd"
    url = "https://www.robots.ox.ac.uk/~vgg/data/dtd/"
    how = _tv_how("DTD", base, f"extract dtd-r1.0.1.tar.gz of {url} into {base / 'dtd'}")
    subs = ["train", "val"] if split == "trainval" else [split]
    need = [folder / "images"] + [folder / "labels" / f"{s}1.txt" for s in subs]
    _require("DTD", folder, need, how)
    parts = [tvd.DTD(str(base), split=s, partition=1, download=False) for s in subs]
    return parts[0] if len(parts) == 1 else _union(parts)


def _aircraft(base: Path, split: str) -> Dataset:
    folder = base / "fgvc-aircraft-2013b" / "data"
    url = "https://www.robots.ox.ac.uk/~vgg/data/fgvc-aircraft/"
    how = _tv_how("FGVCAircraft", base, f"extract fgvc-aircraft-2013b.tar.gz of {url} in {base}")
    need = [folder / "images", folder / "variants.txt", folder / f"images_variant_{split}.txt"]
    _require("FGVC-Aircraft", folder, need, how)
    return tvd.FGVCAircraft(str(base), split=split, annotation_level="variant", download=False)


def _food101(base: Path, split: str) -> Dataset:
    folder, tv_split = base / "food-101", "test" if split == "test" else "train"
    how = _tv_how(
        "Food101", base, f"extract http://data.vision.ee.ethz.ch/cvl/food-101.tar.gz in {base}"
    )
    _require("Food-101", folder, [folder / "images", folder / "meta" / f"{tv_split}.json"], how)
    return tvd.Food101(str(base), split=tv_split, download=False)


def _flowers102(base: Path, split: str) -> Dataset:
    folder = base / "flowers-102"
    url = "https://www.robots.ox.ac.uk/~vgg/data/flowers/102/"
    how = _tv_how(
        "Flowers102",
        base,
        f"put 102flowers.tgz (extracted), imagelabels.mat, setid.mat of {url} in {folder}",
    )
    _require(
        "Flowers-102",
        folder,
        [folder / "jpg", folder / "imagelabels.mat", folder / "setid.mat"],
        how,
    )
    subs = ["train", "val"] if split == "trainval" else [split]
    parts = [Flowers102(str(base), split=s, download=False) for s in subs]
    return parts[0] if len(parts) == 1 else _union(parts)


def _cars(base: Path, split: str) -> Dataset:
    folder = base / "stanford_cars"
    how = (
        "torchvision can no longer download it (the Stanford URL is gone); follow "
        "https://github.com/pytorch/vision/issues/7545#issuecomment-1631441616 (Kaggle images + "
        f"car_devkit.tgz + cars_test_annos_withlabels.mat) and place them in {folder}"
    )
    if split == "test":
        need = [folder / "cars_test_annos_withlabels.mat", folder / "cars_test"]
    else:
        need = [folder / "devkit" / "cars_train_annos.mat", folder / "cars_train"]
    _require("Stanford Cars", folder, [folder / "devkit" / "cars_meta.mat", *need], how)
    return tvd.StanfordCars(str(base), split="test" if split == "test" else "train", download=False)


def _ood_folder(title: str, folder: Path, how: str) -> ImageFiles:
    _require(title, folder, [folder], how)
    ds = ImageFiles(folder)
    if not len(ds):
        raise DatasetNotFoundError(
            f"{title}: no image files ({', '.join(IMG_EXTENSIONS)}) under {folder}. How to get "
            f"it: {how}"
        )
    return ds


def _class_dirs(folder: Path) -> list[str]:
    entries = imagefiles.list_folder(folder)  # an unreadable folder is named as such
    return sorted(d.name for d in entries if d.is_dir() and not d.name.startswith("."))


def _labelled_folder(name: str, path: Path, split: str) -> Dataset:
    """``folder:<path>``: ImageFolder splits with ``train/``'s classes (see the module note)."""
    test = "test" if (path / "test").is_dir() or not (path / "val").is_dir() else "val"
    val = ["val"] if test == "test" and (path / "val").is_dir() else []
    subs = {"train": ["train"], "val": val, "trainval": ["train", *val], "test": [test]}[split]
    if not subs:
        raise ValueError(f"{name} has no 'val' split ({path / 'val'} is absent or is test)")
    layout = f"  {path}/train/<class>/<image>\n  {path}/test/<class>/<image> (or val/: the test)"
    how = "arrange labelled images in torchvision's ImageFolder layout, one folder per class"
    for need in (path / "train", path / test):
        if not need.is_dir() or not _class_dirs(need):
            raise missing_dataset(name, path, f"{layout}\n(no class folders in {need})", how)
    classes, parts = _class_dirs(path / "train"), []
    for sub in subs:
        ds = _split_classes(name, path / sub, classes)
        empty = [classes[c] for c in sorted(set(range(len(classes))) - set(ds.targets))]
        if not len(ds) or (sub == "train" and empty):
            gone = f"{layout}\n(no images of {empty} in {path / sub})"
            raise missing_dataset(name, path, gone, how)
        parts.append(ds)
    return parts[0] if len(parts) == 1 else _union(parts)


def _delegate(name: str) -> Callable[[Path, str], Dataset]:
    def read(base: Path, split: str) -> Dataset:
        return pretrain_datasets.build(name, str(base), "test" if split == "test" else "train")

    return read


_READERS: dict[str, Callable[[Path, str], Dataset]] = {
    "cifar10": _delegate("cifar10"),
    "cifar100": _delegate("cifar100"),
    "stl10": _delegate("stl10"),
    "cinic10": _cinic10,
    "svhn": _svhn,
    "pets": _pets,
    "dtd": _dtd,
    "aircraft": _aircraft,
    "food101": _food101,
    "flowers102": _flowers102,
    "cars": _cars,
}


def build_eval_dataset(name: str, root: str, split: str) -> Dataset:
    """Read evaluation set ``name`` (a key of :data:`EVAL_DATASETS`, ``imagefolder:<path>`` or
    ``folder:<path>``) under ``root``; ``split`` is one of train, val, trainval, test (see the
    module note, which also describes the two prefixes).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    for prefix in (IMAGEFOLDER_PREFIX, FOLDER_PREFIX):
        if name.startswith(prefix) and not name[len(prefix) :]:
            raise ValueError(f"{name!r} names no folder: write {prefix}<path>")
    if name.startswith(IMAGEFOLDER_PREFIX):
        path = Path(name[len(IMAGEFOLDER_PREFIX) :]).expanduser()
        return _ood_folder(name, path, "point imagefolder:<path> at a folder holding images")
    if name.startswith(FOLDER_PREFIX):
        return _labelled_folder(name, Path(name[len(FOLDER_PREFIX) :]).expanduser(), split)
    if name not in EVAL_DATASETS:
        known = ", ".join([*EVAL_DATASETS, f"{IMAGEFOLDER_PREFIX}<path>", f"{FOLDER_PREFIX}<path>"])
        raise ValueError(f"unknown evaluation dataset {name!r}; known: {known}")
    spec, base = EVAL_DATASETS[name], Path(root).expanduser()
    if split not in spec.splits:
        raise ValueError(
            f"{name} has no {split!r} split (it has {', '.join(spec.splits)}): use trainval to fit "
            "and test to report"
        )
    if name in _READERS:
        return _with_targets(_READERS[name](base, split))
    folder = base / name
    if name == "textures" and not folder.exists() and (base / "dtd" / "dtd" / "images").is_dir():
        folder = base / "dtd" / "dtd" / "images"  # the same 5,640 DTD images
    return _ood_folder(
        f"OOD set {name}", folder, f"{OOD_HOW[name]}; images anywhere under {folder}"
    )


def transfer_transform(name: str, mean: tuple[float, ...], std: tuple[float, ...]) -> v2.Compose:
    """Resize (short side), centre-crop and normalise as the seed transfer protocol does: 32-px
    sets upsampled to 224, STL-10 at 96, fine-grained sets and ``folder:<path>`` resize 256 +
    centre crop 224.

    OOD sets (``imagefolder:<path>`` too) have no size of their own: read them with the
    in-distribution set's transform.
    """
    if name.startswith(FOLDER_PREFIX):
        size, resize = FOLDER_SIZES
        return eval_transform(size=size, resize=resize, mean=mean, std=std)
    spec = EVAL_DATASETS.get(name)
    if name.startswith(IMAGEFOLDER_PREFIX):
        spec = EvalSet("OOD: any image folder", None, None)
    if spec is None:
        raise ValueError(f"unknown evaluation dataset {name!r}; known: {', '.join(EVAL_DATASETS)}")
    if spec.image_size is None or spec.resize is None:
        raise ValueError(
            f"{name} is an OOD set, read at the in-distribution set's resolution: use that set's "
            "transform (transfer_transform(<ID set>, ...) or pretrain.data.pipeline.eval_transform)"
        )
    return eval_transform(size=spec.image_size, resize=spec.resize, mean=mean, std=std)
