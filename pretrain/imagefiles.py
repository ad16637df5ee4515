"""Images as researchers keep them: class folders (``split/<class>/<image>``) or image-list files
(one ``relative/path label`` per line, the layout of OpenOOD's ``benchmark_imglist`` files).

Layout problems are found when the dataset is built, before training, and raise
:class:`DatasetError` naming the path. A file that cannot be decoded when it is read (corrupt,
truncated, not an image) raises :class:`BadImageError` naming the file; :class:`SkipBadImages`
substitutes the next readable image instead and counts the skips in shared memory, so the count
reaches the main process from any number of loader workers.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torchvision
from PIL import Image
from torch.utils.data import Dataset, get_worker_info
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as TF

# what ImageFolder accepts, lower case
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
DECODE_IMAGE = (".jpg", ".jpeg", ".png", ".webp")  # torchvision.io.decode_image reads these
MAX_WORKER_SLOTS = 256  # skip-counter slots: slot 0 is the main process, slot w+1 loader worker w


class DatasetError(ValueError):
    """The data on disk cannot be used as laid out; the message names the path."""


class BadImageError(RuntimeError):
    """An image file could not be decoded; the message names the file."""


def read_image(path: str | Path) -> torch.Tensor:
    """Decode an image file to a uint8 RGB tensor (3, H, W).

    JPEG/PNG/WebP go through ``torchvision.io.decode_image`` (libjpeg-turbo; faster than PIL's
    open + convert + to-tensor), other formats through PIL with a full decode. Either way a corrupt
    or truncated file raises :class:`BadImageError` with the path, never a bare decoder message.
    """
    path = str(path)
    try:
        if path.lower().endswith(DECODE_IMAGE):
            data = torchvision.io.read_file(path)
            return torchvision.io.decode_image(data, mode=torchvision.io.ImageReadMode.RGB)
        with Image.open(path) as img:
            return TF.pil_to_tensor(img.convert("RGB"))  # convert() forces the full decode
    except (OSError, RuntimeError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise BadImageError(f"cannot read image {path}: {e}") from None


def is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def scan_folder(folder: Path) -> tuple[list[tuple[str, int]], list[str]]:
    """``folder/<class>/<image>`` -> (samples sorted by class then file, sorted class names)."""
    if not folder.is_dir():
        raise DatasetError(f"{folder} is not a folder")
    classes = sorted(e.name for e in os.scandir(folder) if e.is_dir())
    if not classes:
        raise DatasetError(
            f"{folder} has no class folders: expected {folder}/<class>/<image> (one folder per "
            "class, as torchvision's ImageFolder)"
        )
    samples: list[tuple[str, int]] = []
    empty = []
    for label, name in enumerate(classes):
        files = []
        for root, _, names in os.walk(folder / name, followlinks=True):
            files += [os.path.join(root, n) for n in names if is_image(n)]
        if not files:
            empty.append(str(folder / name))
        samples += [(f, label) for f in sorted(files)]
    if empty:
        raise DatasetError(
            f"{len(empty)} class folder(s) hold no images ({', '.join(IMAGE_EXTENSIONS)}): "
            + ", ".join(empty[:5])
            + (" ..." if len(empty) > 5 else "")
        )
    return samples, classes


def read_list(list_file: Path, root: Path) -> tuple[list[tuple[str, int]], list[str]]:
    """Lines ``relative/path label`` (paths relative to ``root``; blank and ``#`` lines skipped)
    -> (samples, class names "0".."C-1" for C = max label + 1)."""
    if not list_file.is_file():
        raise DatasetError(f"image list {list_file} does not exist")
    samples: list[tuple[str, int]] = []
    for number, line in enumerate(list_file.read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        parts = text.rsplit(maxsplit=1)
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            raise DatasetError(
                f"{list_file}:{number}: expected 'relative/path label', got {text!r}"
            )
        samples.append((str(root / parts[0]), int(parts[1])))
    if not samples:
        raise DatasetError(f"image list {list_file} lists no images")
    missing = [p for p, _ in samples if not os.path.isfile(p)]
    if missing:
        raise DatasetError(
            f"{len(missing)} of the {len(samples)} images listed in {list_file} do not exist "
            f"(paths are relative to data.root {root}); first: {', '.join(missing[:3])}"
        )
    bad = sorted({y for _, y in samples if y < 0})
    if bad:
        raise DatasetError(f"{list_file}: negative labels {bad[:5]}")
    num_classes = max(y for _, y in samples) + 1
    return samples, [str(c) for c in range(num_classes)]


class ImageFiles(Dataset):
    """``(uint8 tv_tensors.Image (3, H, W), label)`` from a list of ``(path, label)``."""

    def __init__(self, samples: list[tuple[str, int]], classes: list[str]) -> None:
        self.samples, self.classes = samples, classes
        self.targets = [y for _, y in samples]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[tv_tensors.Image, int]:
        path, label = self.samples[i]
        return tv_tensors.Image(read_image(path)), label


def skip_counter() -> torch.Tensor:
    """A shared int64 counter per process slot (see :class:`SkipBadImages`)."""
    return torch.zeros(MAX_WORKER_SLOTS, dtype=torch.int64).share_memory_()


class SkipBadImages(Dataset):
    """Replaces an unreadable image by the next readable one (index + 1, + 2, ...: deterministic,
    so the batch size stays fixed and a resumed run replays the same substitutes) and counts each
    skip in ``counter`` (shared memory, one slot per loader worker: no lock, no lost update)."""

    def __init__(self, base: Dataset, counter: torch.Tensor) -> None:
        self.base, self.counter = base, counter
        for attr in ("targets", "classes"):
            if hasattr(base, attr):
                setattr(self, attr, getattr(base, attr))

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        n = len(self.base)
        for t in range(n):
            try:
                return self.base[(i + t) % n]
            except BadImageError:
                worker = get_worker_info()
                self.counter[0 if worker is None else 1 + worker.id % (MAX_WORKER_SLOTS - 1)] += 1
        raise DatasetError("data.skip_bad_images: no image of the dataset could be read")
