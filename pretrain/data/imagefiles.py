"""Images as researchers keep them: class folders (``split/<class>/<image>``) or image-list files
(one ``relative/path label`` per line, the layout of OpenOOD's ``benchmark_imglist`` files).

Layout problems are found when the dataset is built, before training, and raise
:class:`DatasetError` naming the path. A file that cannot be decoded when it is read (corrupt,
truncated, not an image) raises :class:`BadImageError` naming the file; :class:`SkipBadImages`
substitutes the next readable image instead and counts the skips in shared memory, so the count
reaches the main process from any number of loader workers.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset, get_worker_info
from torchvision import tv_tensors
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms.v2 import functional as TF

# what ImageFolder accepts, lower case
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
DECODE_IMAGE = (".jpg", ".jpeg", ".png", ".webp")  # torchvision.io.decode_image reads these
MAX_WORKER_SLOTS = 256  # skip-counter slots: slot 0 is the main process, slot w+1 loader worker w


class DatasetError(ValueError):
    """The data on disk cannot be used as laid out; the message names the path."""


class BadImageError(RuntimeError):
    """An image file could not be decoded; the message names the file."""


def warn(message: str) -> None:
    """Print ``warning: <message>`` to stderr once per process (rank 0 only under DDP)."""
    if message in _WARNED:
        return
    _WARNED.add(message)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        if torch.distributed.get_rank() != 0:
            return
    print(f"warning: {message}", file=sys.stderr, flush=True)


_WARNED: set[str] = set()


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except PermissionError:
        raise BadImageError(
            f"cannot read image {path}: permission denied; give the user running negmine read "
            "rights on it (chmod a+r)"
        ) from None


def _to_uint8(image: torch.Tensor) -> torch.Tensor:
    """A decoded image as uint8 (3, H, W): 16-bit samples keep their top byte (what
    ``convert_image_dtype`` does from uint16 to uint8), an animation its first frame."""
    if image.ndim == 4:  # an animated GIF: (frames, C, H, W)
        image = image[0]
    if image.dtype != torch.uint8:  # 16-bit PNG: uint16
        image = (image.to(torch.int32) >> 8).to(torch.uint8)
    return image


def pil_rgb(img: Image.Image) -> Image.Image:
    """``img.convert("RGB")``, except that 16-bit grey levels (PIL modes I;16*: 16-bit TIFF,
    PGM) keep their top byte instead of saturating at 255; an animation gives its current (first)
    frame."""
    if img.mode.startswith("I;16"):
        grey = np.asarray(img).astype(np.int64) >> 8
        return Image.fromarray(grey.astype(np.uint8), "L").convert("RGB")
    return img.convert("RGB")  # convert() forces the full decode


def read_image(path: str | Path) -> torch.Tensor:
    """Decode an image file to a uint8 RGB tensor (3, H, W).

    JPEG/PNG/WebP go through ``torchvision.io.decode_image`` (libjpeg-turbo; faster than PIL's
    open + convert + to-tensor), other formats through PIL with a full decode. 16-bit images keep
    the top byte of each sample; an animated GIF (whatever its name) gives its first frame. A
    corrupt, truncated or unreadable file raises :class:`BadImageError` with the path, never a
    bare decoder message.
    """
    path = str(path)
    data = _read_bytes(path)
    if not data:  # the decoders' own words: "buffer length (0) and count (-1) must not be 0"
        raise BadImageError(f"cannot read image {path}: the file is empty (0 bytes)")
    try:
        if path.lower().endswith(DECODE_IMAGE):
            raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            return _to_uint8(decode_image(raw, mode=ImageReadMode.RGB))
        with Image.open(io.BytesIO(data)) as img:
            return TF.pil_to_tensor(pil_rgb(img))
    except (OSError, RuntimeError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise BadImageError(f"cannot read image {path}: {e}") from None


def read_pil(path: str | Path) -> Image.Image:
    """An image file as a PIL RGB image (the evaluation sets' loader): torchvision's
    ``pil_loader`` with 16-bit grey levels scaled as :func:`pil_rgb` does, and an unreadable or
    corrupt file a :class:`BadImageError` naming it."""
    data = _read_bytes(str(path))
    if not data:
        raise BadImageError(f"cannot read image {path}: the file is empty (0 bytes)")
    try:
        with Image.open(io.BytesIO(data)) as img:
            return pil_rgb(img)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise BadImageError(f"cannot read image {path}: {e}") from None


def bad_image_line(e: Exception) -> str:
    """The 'cannot read image PATH: why' line of a :class:`BadImageError`, also when a loader
    worker re-raised it inside its traceback."""
    for line in reversed(str(e).splitlines()):
        if "BadImageError: " in line:
            return line.split("BadImageError: ", 1)[1]
    return str(e)


def is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def list_folder(path: str | Path) -> list[os.DirEntry]:
    """The entries of folder ``path`` sorted by name; an unreadable folder raises
    :class:`DatasetError` naming it (``os.walk`` would pass it over as empty)."""
    try:
        with os.scandir(path) as entries:
            return sorted(entries, key=lambda e: e.name)
    except PermissionError:
        raise DatasetError(
            f"cannot list folder {path}: permission denied; give the user running negmine read "
            "and execute rights on it (chmod a+rx)"
        ) from None
    except OSError as e:
        raise DatasetError(f"cannot list folder {path}: {e.strerror or e}") from None


def _folder_key(path: str | Path) -> tuple[int, int]:
    """(st_dev, st_ino) of the real folder ``path`` leads to."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise DatasetError(f"cannot read folder {path}: {e.strerror or e}") from None
    return st.st_dev, st.st_ino


class FolderWalk:
    """Files under the folders of one split, symbolic links followed, no folder entered twice.

    Folders are told apart by the ``(st_dev, st_ino)`` of the real folder. The split folder, the
    folders above it and the ``starts`` (class folders) are known from the outset, so a link back
    to any of them is a loop (or a second path to another class's images) and is not followed;
    :meth:`report` names every such link in one warning.
    """

    def __init__(self, top: Path, starts: Sequence[Path] = ()) -> None:
        self.top = top
        real = Path(os.path.realpath(top))
        self.known = {_folder_key(p) for p in (real, *real.parents)}
        self.known |= {_folder_key(p) for p in starts}
        self.seen: set[tuple[int, int]] = set()
        self.skipped: list[str] = []

    def files(self, start: Path, keep: Callable[[str], bool]) -> list[str]:
        """Paths (through the links, as found) of the files under ``start`` that ``keep``."""
        found: list[str] = []
        stack = [str(start)]
        while stack:
            folder = stack.pop()
            key = _folder_key(folder)
            if key in self.seen or (key in self.known and folder != str(start)):
                self.skipped.append(f"{folder} -> {os.path.realpath(folder)}")
                continue
            self.seen.add(key)
            for entry in reversed(list_folder(folder)):
                if entry.is_dir():  # follows links
                    stack.append(entry.path)
                elif keep(entry.path):
                    found.append(entry.path)
        return found

    def report(self) -> None:
        if self.skipped:
            warn(
                f"not following {len(self.skipped)} symbolic link(s) under {self.top} that lead "
                "back to a folder already read or above it (a loop, or a second path to the same "
                "images): "
                + ", ".join(self.skipped[:5])
                + (" ..." if len(self.skipped) > 5 else "")
            )


def folder_samples(
    directory: str | Path,
    class_to_idx: dict[str, int],
    keep: Callable[[str], bool],
    allow_empty: bool = False,
) -> list[tuple[str, int]]:
    """torchvision ``DatasetFolder.make_dataset`` through :class:`FolderWalk` (links followed,
    never into a folder twice): ``(path, class index)`` per file that ``keep``, class by class,
    files sorted; classes without a folder are left out, and without images too if
    ``allow_empty`` (else :class:`DatasetError` names them)."""
    top = Path(directory)
    names = [n for n in sorted(class_to_idx) if (top / n).is_dir()]
    walk = FolderWalk(top, [top / n for n in names])
    samples: list[tuple[str, int]] = []
    for name in names:
        samples += [(f, class_to_idx[name]) for f in sorted(walk.files(top / name, keep))]
    walk.report()
    present = {y for _, y in samples}
    empty = sorted(c for c, i in class_to_idx.items() if i not in present)
    if empty and not allow_empty:
        raise DatasetError(
            f"{len(empty)} class folder(s) under {top} are missing or hold no images: "
            + ", ".join(empty[:5])
            + (" ..." if len(empty) > 5 else "")
        )
    return samples


def scan_folder(
    folder: Path, classes: list[str] | None = None, keep: Callable[[str], bool] = is_image
) -> tuple[list[tuple[str, int]], list[str]]:
    """``folder/<class>/<image>`` -> (samples sorted by class then file, class names).

    ``classes=None`` reads a training split: its sorted class folders are the classes, and each
    must hold images. Another split gives the training split's ``classes``: its folders are
    labelled by name, a folder of a class training lacks is an error naming it, and training
    classes without images here are reported once (a warning).
    """
    if not folder.is_dir():
        raise DatasetError(f"{folder} is not a folder")
    names = [e.name for e in list_folder(folder) if e.is_dir()]
    if not names:
        raise DatasetError(
            f"{folder} has no class folders: expected {folder}/<class>/<image> (one folder per "
            "class, as torchvision's ImageFolder)"
        )
    if classes is not None:
        extra = [n for n in names if n not in classes]
        if extra:
            raise DatasetError(
                f"{folder}: class folder(s) {', '.join(extra[:10])}"
                + (" ..." if len(extra) > 10 else "")
                + f" are not among the {len(classes)} classes of the training split, so they "
                "have no label: remove them or add them to the training split"
            )
    walk = FolderWalk(folder, [folder / n for n in names])
    index = {c: i for i, c in enumerate(names if classes is None else classes)}
    samples: list[tuple[str, int]] = []
    empty = []
    for name in names:
        files = walk.files(folder / name, keep)
        if not files:
            empty.append(name)
        samples += [(f, index[name]) for f in sorted(files)]
    walk.report()
    if classes is None and empty:
        raise DatasetError(
            f"{len(empty)} class folder(s) hold no images ({', '.join(IMAGE_EXTENSIONS)}): "
            + ", ".join(str(folder / n) for n in empty[:5])
            + (" ..." if len(empty) > 5 else "")
        )
    if classes is None:
        return samples, names
    if not samples:
        raise DatasetError(f"{folder} holds no images ({', '.join(IMAGE_EXTENSIONS)})")
    samples.sort(key=lambda s: (s[1], s[0]))
    missing_classes(folder, classes, {y for _, y in samples})
    return samples, list(classes)


def missing_classes(split: str | Path, classes: list[str], present: set[int]) -> None:
    """Warn once that ``split`` has no images of some training ``classes`` (label indices)."""
    absent = [c for i, c in enumerate(classes) if i not in present]
    if absent:
        warn(
            f"{split} has no images of {len(absent)} of the {len(classes)} training classes "
            f"({', '.join(absent[:10])}{' ...' if len(absent) > 10 else ''}); its images keep "
            "the training split's labels, and its accuracy covers the other classes"
        )


def read_list(
    list_file: Path, root: Path, classes: list[str] | None = None
) -> tuple[list[tuple[str, int]], list[str]]:
    """Lines ``relative/path label`` (paths relative to ``root``; blank and ``#`` lines skipped)
    -> (samples, class names "0".."C-1" for C = max label + 1). ``classes``: the training
    split's, for another split: a label beyond them is an error, a class without images here is
    reported once (a warning)."""
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
    if classes is None:
        return samples, [str(c) for c in range(max(y for _, y in samples) + 1)]
    beyond = sorted({y for _, y in samples if y >= len(classes)})
    if beyond:
        raise DatasetError(
            f"{list_file}: label(s) {', '.join(map(str, beyond[:10]))} are not classes of the "
            f"training split (labels 0..{len(classes) - 1}), so the model has no class for them: "
            "remove those lines or add the class to the training split"
        )
    missing_classes(list_file, classes, {y for _, y in samples})
    return samples, list(classes)


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
        self.last_skips = 0  # unreadable images skipped for the last item read (this process)
        for attr in ("targets", "classes"):
            if hasattr(base, attr):
                setattr(self, attr, getattr(base, attr))

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        n = len(self.base)
        for t in range(n):
            try:
                item = self.base[(i + t) % n]
                self.last_skips = t
                return item
            except BadImageError:
                worker = get_worker_info()
                self.counter[0 if worker is None else 1 + worker.id % (MAX_WORKER_SLOTS - 1)] += 1
        raise DatasetError("data.skip_bad_images: no image of the dataset could be read")
