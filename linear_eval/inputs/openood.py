"""OpenOOD v1.5's benchmarks read from its own data layout (Zhang et al. 2023, "OpenOOD v1.5:
Enhanced Benchmark for Out-of-Distribution Detection", https://arxiv.org/abs/2306.09301; code
Jingkang50/OpenOOD ``openood/evaluation_api``).

Layout (what OpenOOD's ``download`` script leaves under ``DIR``)::

    DIR/images_classic/<set>/...            CIFAR / TinyImageNet / MNIST / SVHN / Textures / Places
    DIR/images_largescale/<set>/...         ImageNet-200 and its OOD sets
    DIR/benchmark_imglist/<benchmark>/{train,val,test}_<set>.txt   lines "relative/path label"

Groups are v1.5's (``evaluation_api/datasets.py``): CIFAR-10 near = CIFAR-100, TinyImageNet; far =
MNIST, SVHN, Textures, Places365. Preprocessing is v1.5's test transform
(``evaluation_api/preprocessor.py``): RGB, Resize(pre_size, bilinear), CenterCrop(img_size),
ToTensor, Normalize with the benchmark's statistics. Independent of :mod:`pretrain.data.datasets`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision.transforms import InterpolationMode, v2

from pretrain.data.datasets import DatasetNotFoundError


@dataclass(frozen=True)
class Benchmark:
    name: str
    images: str  # images_classic or images_largescale
    id_set: str
    near: tuple[str, ...]
    far: tuple[str, ...]
    pre_size: int
    img_size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    num_classes: int


IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
BENCHMARKS = {
    "cifar10": Benchmark(
        "cifar10",
        "images_classic",
        "cifar10",
        ("cifar100", "tin"),
        ("mnist", "svhn", "texture", "places365"),
        32,
        32,
        (0.4914, 0.4822, 0.4465),
        (0.2470, 0.2435, 0.2616),
        10,
    ),
    "cifar100": Benchmark(
        "cifar100",
        "images_classic",
        "cifar100",
        ("cifar10", "tin"),
        ("mnist", "svhn", "texture", "places365"),
        32,
        32,
        (0.5071, 0.4865, 0.4409),
        (0.2673, 0.2564, 0.2762),
        100,
    ),
    "imagenet200": Benchmark(
        "imagenet200",
        "images_largescale",
        "imagenet200",
        ("ssb_hard", "ninco"),
        ("inaturalist", "textures", "openimage_o"),
        256,
        224,
        IMAGENET_MEAN,
        IMAGENET_STD,
        200,
    ),
}


def transform(b: Benchmark) -> v2.Compose:
    """OpenOOD v1.5's ``TestStandardPreProcessor`` for benchmark ``b``."""
    return v2.Compose(
        [
            v2.ToImage(),
            v2.Resize(b.pre_size, interpolation=InterpolationMode.BILINEAR, antialias=True),
            v2.CenterCrop(b.img_size),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(b.mean, b.std),
        ]
    )


def list_path(root: Path, b: Benchmark, split: str, name: str) -> Path:
    return Path(root) / "benchmark_imglist" / b.name / f"{split}_{name}.txt"


class ImageList(Dataset):
    """``(image, label)`` from an OpenOOD image list: ``relative/path label`` per line, paths
    relative to ``root/<images_classic|images_largescale>``."""

    def __init__(self, root: str | Path, b: Benchmark, list_file: Path, *, tf: v2.Compose) -> None:
        self.base = Path(root) / b.images
        self.items: list[tuple[str, int]] = []
        for n, line in enumerate(list_file.read_text().splitlines(), 1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) < 2 or not parts[-1].lstrip("-").isdigit():
                raise ValueError(f"{list_file}:{n}: expected 'relative/path label', got {line!r}")
            self.items.append((" ".join(parts[:-1]), int(parts[-1])))
        if not self.items:
            raise ValueError(f"{list_file} lists no images")
        self.transform = tf

    def missing(self) -> list[Path]:
        """Listed files that are not on disk (every one is checked before extraction)."""
        return [self.base / p for p, _ in self.items if not (self.base / p).is_file()]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.items[index]
        with Image.open(self.base / path) as im:
            return self.transform(im.convert("RGB")), label


def open_sets(
    root: str | Path, b: Benchmark
) -> tuple[ImageList, ImageList, dict[str, ImageList], dict[str, str]]:
    """The ID train (kNN bank) and test sets, the OOD test sets that are present, and, for each
    OOD set that is not, the reason it is skipped. A missing ID list or image is an error naming
    the expected path (:class:`DatasetNotFoundError`)."""
    tf = transform(b)
    id_sets = []
    for split in ("train", "test"):
        f = list_path(root, b, split, b.id_set)
        if not f.is_file():
            raise DatasetNotFoundError(
                f"OpenOOD {b.name}: the ID list {f} is missing (expected OpenOOD's layout "
                f"DIR/benchmark_imglist/{b.name}/{split}_{b.id_set}.txt; run OpenOOD's download "
                "script for the benchmark)"
            )
        ds = ImageList(root, b, f, tf=tf)
        gone = ds.missing()
        if gone:
            raise DatasetNotFoundError(
                f"OpenOOD {b.name}: {len(gone)} ID images listed in {f} are missing, e.g. {gone[0]}"
            )
        id_sets.append(ds)
    ood: dict[str, ImageList] = {}
    skipped: dict[str, str] = {}
    for name in b.near + b.far:
        f = list_path(root, b, "test", name)
        if not f.is_file():
            skipped[name] = f"list {f} missing"
            continue
        ds = ImageList(root, b, f, tf=tf)
        gone = ds.missing()
        if gone:
            skipped[name] = f"{len(gone)} of {len(ds)} images missing, e.g. {gone[0]}"
            continue
        ood[name] = ds
    return id_sets[0], id_sets[1], ood, skipped
