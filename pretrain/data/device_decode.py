"""Stage 1 on the training device (``data.decode_on: device``): JPEG decode and RandomResizedCrop
of a whole batch in the main process, from the parameters the loader workers drew.

The workers only read each file's bytes, parse its JPEG header for the size (the crop box depends
on it) and draw the sample's crop boxes and parameter rows from ``sample_rng(seed, epoch,
index)`` in the order :class:`pretrain.data.views.CropViews` draws them, so the rows are the CPU
path's to the bit and a resume or any rank count replays them. The main process then decodes the
batch with one ``torchvision.io.decode_jpeg(list, device=...)`` call (nvjpeg on CUDA) and resizes
every crop with two batched matrix products
(:func:`pretrain.data.device_resize.resize_crops`).

The resize is aten's antialiased bilinear uint8 kernel (``_upsample_bilinear2d_aa``, what
``TF.resized_crop`` runs on a uint8 CPU tensor): the same filter weights, quantised to integers
with the same precision rule, a horizontal pass rounded to uint8, then a vertical one. Every sum
is of integers below 2**24, so float32 products are exact in any summation order: the crop of an
image is the same whatever else is in its batch, on a CPU or a GPU (one process = DDP). It equals
``TF.resized_crop``'s on every pixel for 500x375 images cropped to 224 px (tests), and is never
more than one level off elsewhere: the weight precision is capped at 16 bits where aten goes
further, at downscales beyond about 4x (99.87 % of pixels equal at 8-200 px -> 16 px).

Files the device cannot take decode on the CPU in the worker, per file, as the CPU path does:
other formats (PNG, ...), JPEGs nvjpeg does not read (arithmetic-coded, lossless, 12-bit, CMYK)
and JPEGs whose header or end marker is broken. A batch whose decode fails (a corrupt file with
a valid header) is decoded again file by file to find the culprit, which then goes through the
CPU path in the main process: ``data.skip_bad_images`` substitutes and counts it there as the CPU
path does, else :class:`pretrain.data.imagefiles.BadImageError` names the file. Each such file is
named once in the log.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torchvision
from torch.utils.data import Dataset, Subset

from pretrain.data import augment_params as ap
from pretrain.data import imagefiles, views
from pretrain.data.device_resize import resize_crops

SOF_DEVICE = (0xC0, 0xC1, 0xC2)  # Huffman baseline, extended sequential, progressive
SOF_OTHER = (0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF)  # nvjpeg reads none
STANDALONE = {0x01, *range(0xD0, 0xD8)}  # markers without a length field


def jpeg_size(data: bytes) -> tuple[int, int] | str:
    """``(height, width)`` of a JPEG the device decoder reads, else why not (a string).

    Reads the markers up to the frame header (SOFn) and checks that an end-of-image marker
    follows it: a cheap check in the worker that catches truncated files and formats nvjpeg
    refuses, so the batched decode rarely fails."""
    if data[:2] != b"\xff\xd8":
        return "not a JPEG file"
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return "broken JPEG header"
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in STANDALONE:
            i += 2
            continue
        if marker in (0xD9, 0xDA):
            return "no frame header before the image data"
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if length < 2 or i + 2 + length > n:
            return "broken JPEG header"
        if marker in SOF_DEVICE or marker in SOF_OTHER:
            seg = data[i + 4 : i + 2 + length]
            if len(seg) < 6:
                return "broken JPEG header"
            if marker in SOF_OTHER:
                return f"JPEG process SOF{marker - 0xC0} (arithmetic, lossless or hierarchical)"
            bits, comps = seg[0], seg[5]
            height, width = int.from_bytes(seg[1:3], "big"), int.from_bytes(seg[3:5], "big")
            if bits != 8:
                return f"{bits}-bit JPEG"
            if comps not in (1, 3):
                return f"JPEG with {comps} colour components"
            if height == 0 or width == 0:
                return "JPEG without a size in its frame header"
            if data.rfind(b"\xff\xd9", i + 2 + length) < 0:
                return "truncated JPEG (no end-of-image marker)"
            return height, width
        i += 2 + length
    return "broken JPEG header"


def file_samples(ds: Dataset) -> list[tuple[str, int]] | None:
    """``(path, label)`` of every index of ``ds`` when its images are files read by
    :func:`pretrain.data.imagefiles.read_image` (through subsets and skip wrappers), else None."""
    if isinstance(ds, Subset):
        inner = file_samples(ds.dataset)
        return None if inner is None else [inner[i] for i in ds.indices]
    if isinstance(ds, imagefiles.SkipBadImages):
        return file_samples(ds.base)
    samples = getattr(ds, "samples", None)
    if isinstance(ds, imagefiles.ImageFiles) or (
        samples is not None and getattr(ds, "loader", None) is imagefiles.read_image
    ):
        return [(str(p), int(y)) for p, y in samples]
    return None


class EncodedViews(Dataset):
    """The worker side of ``decode_on: device``. Item for key ``(epoch, index)``: ``(payload,
    label, index, rows, boxes, epoch, note)``; ``payload`` the file's bytes (1-d uint8) and
    ``boxes`` (K, 4) the crop boxes (top, left, h, w) in its pixels, or, for a file decoded here
    on the CPU, ``payload`` the K crops (K, 3, S, S) of :class:`pretrain.data.views.CropViews` and
    ``boxes`` None. ``rows`` (K, NUM_COLUMNS) are CropViews' rows, K = 2 + support views;
    ``note`` names a file decoded on the CPU and why ("" otherwise)."""

    def __init__(self, cpu: views.CropViews, files: list[tuple[str, int]]) -> None:
        spec = cpu.spec
        if spec.affine_degrees > 0 or spec.affine_translate > 0:
            raise ValueError("the device crop has no RandomAffine (data.affine_* must be 0)")
        if len(files) != len(cpu):
            raise ValueError(f"{len(files)} files for a dataset of {len(cpu)} images")
        self.cpu, self.files = cpu, files
        self.seed, self.spec, self.count = cpu.seed, spec, 2 + cpu.support_views

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, key: tuple[int, int]) -> tuple[Any, ...]:
        epoch, index = key
        path, label = self.files[index]
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            return self.on_cpu(key, path, f"unreadable: {e}")
        size = jpeg_size(data)
        if isinstance(size, str):
            return self.on_cpu(key, path, size)
        h, w = size
        rng = ap.sample_rng(self.seed, epoch, index)
        s = self.spec.image_size
        whole = [0.0, 0.0, float(s), float(s)] + ap.IDENTITY_THETA
        rows, boxes = [], []
        for _ in range(self.count):  # the draws of CropViews.__getitem__, in its order
            if (h, w) == (s, s):  # defers_crop: stage 2 crops; the device keeps the image whole
                rows.append(views.deferred_row(self.spec, rng))
                boxes.append((0, 0, s, s))
            else:
                box = ap.crop_box(rng, height=h, width=w, scale=self.spec.crop_scale)
                rows.append(views.view_params(self.spec, rng) + whole)
                boxes.append(box)
        payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return (
            payload,
            label,
            index,
            torch.tensor(rows, dtype=torch.float32),
            torch.tensor(boxes, dtype=torch.int64),
            epoch,
            "",
        )

    def on_cpu(self, key: tuple[int, int], path: str, why: str) -> tuple[Any, ...]:
        """The CPU path for one file (CropViews' item, with data.skip_bad_images if set)."""
        epoch, index = key
        try:
            image = imagefiles.read_image(path)
        except imagefiles.BadImageError as e:
            if not isinstance(_images(self.cpu.base), imagefiles.SkipBadImages):
                raise
            # CropViews' item through SkipBadImages: the next readable image, counted
            return cpu_payload(self.cpu[key], epoch, f"{path}: skipped, unreadable ({e})")
        item = self.cpu.make(image, self.files[index][1], epoch, index)
        return cpu_payload(item, epoch, f"{path}: decoded on the CPU ({why})")


def _images(ds: Dataset) -> Dataset:
    while isinstance(ds, Subset):
        ds = ds.dataset
    return ds


def cpu_payload(item: tuple[Any, ...], epoch: int, note: str) -> tuple[Any, ...]:
    """A CropViews item as an EncodedViews item (the crops stacked, no boxes)."""
    v1, v2, label, index, rows, *support = item
    crops = torch.stack([v1, v2, *(support[0] if support else [])])
    return crops, label, index, rows, None, epoch, note


@dataclass
class EncodedBatch:
    """A collated batch of :class:`EncodedViews` items (made in the worker)."""

    encoded: torch.Tensor  # the JPEG files' bytes, concatenated (1-d uint8)
    lengths: list[int]  # bytes per file
    boxes: torch.Tensor  # (J, K, 4) crop boxes of the J files decoded on the device
    where: torch.Tensor  # (J,) their positions in the batch
    crops: torch.Tensor  # (N - J, K, 3, S, S) crops made on the CPU in the worker
    crop_where: torch.Tensor  # (N - J,) their positions
    labels: torch.Tensor  # (N,)
    indices: torch.Tensor  # (N,)
    params: torch.Tensor  # (N, K, NUM_COLUMNS) CropViews' rows
    keys: list[tuple[int, int]]  # (epoch, index) of the device files, for the fallback
    paths: list[str]  # of the device files
    notes: list[str] = field(default_factory=list)

    def pin_memory(self) -> EncodedBatch:
        self.crops, self.params = self.crops.pin_memory(), self.params.pin_memory()
        self.where, self.crop_where = self.where.pin_memory(), self.crop_where.pin_memory()
        return self


def collate(
    items: list[tuple[Any, ...]], *, files: list[tuple[str, int]], size: int, count: int
) -> EncodedBatch:
    """Collate EncodedViews items (in the worker: one shared tensor of bytes per batch)."""
    dev = [i for i, it in enumerate(items) if it[4] is not None]
    cpu = [i for i, it in enumerate(items) if it[4] is None]
    encoded = [items[i][0] for i in dev]
    crops = (
        torch.stack([items[i][0] for i in cpu])
        if cpu
        else torch.empty(0, count, 3, size, size, dtype=torch.uint8)
    )
    return EncodedBatch(
        encoded=torch.cat(encoded) if encoded else torch.empty(0, dtype=torch.uint8),
        lengths=[len(e) for e in encoded],
        boxes=(
            torch.stack([items[i][4] for i in dev])
            if dev
            else torch.empty(0, count, 4, dtype=torch.int64)
        ),
        where=torch.tensor(dev, dtype=torch.int64),
        crops=crops,
        crop_where=torch.tensor(cpu, dtype=torch.int64),
        labels=torch.tensor([it[1] for it in items], dtype=torch.int64),
        indices=torch.tensor([it[2] for it in items], dtype=torch.int64),
        params=torch.stack([it[3] for it in items]),
        keys=[(items[i][5], items[i][2]) for i in dev],
        paths=[files[items[i][2]][0] for i in dev],
        notes=[it[6] for it in items if it[6]],
    )


class Collate:
    """A picklable ``collate_fn`` for the loader workers."""

    def __init__(self, ds: EncodedViews) -> None:
        self.files, self.size, self.count = ds.files, ds.spec.image_size, ds.count

    def __call__(self, items: list[tuple[Any, ...]]) -> EncodedBatch:
        return collate(items, files=self.files, size=self.size, count=self.count)


class DeviceCrops:
    """Turns an :class:`EncodedBatch` into CropViews' batch ``(x1, x2, labels, indices, params[,
    support])`` with the uint8 crops on ``device``: one batched decode, batched crops."""

    def __init__(self, ds: EncodedViews, device: torch.device | str) -> None:
        self.ds, self.device = ds, torch.device(device)
        self.named: set[str] = set()

    def log(self, notes: list[str]) -> None:
        for note in notes:
            if note not in self.named:
                self.named.add(note)
                print(f"data.decode_on=device: {note}", flush=True)

    def decode(self, batch: EncodedBatch) -> list[torch.Tensor | None]:
        """The batch's JPEGs on the device; None where a file fails on its own."""
        files = list(batch.encoded.split(batch.lengths))
        rgb = torchvision.io.ImageReadMode.RGB
        try:
            return list(torchvision.io.decode_jpeg(files, mode=rgb, device=self.device))
        except RuntimeError:  # one bad file fails the list: find it, file by file
            out: list[torch.Tensor | None] = []
            for data in files:
                try:
                    out.append(torchvision.io.decode_jpeg(data, mode=rgb, device=self.device))
                except RuntimeError:
                    out.append(None)
            return out

    def __call__(self, batch: EncodedBatch) -> tuple[torch.Tensor, ...]:
        self.log(batch.notes)
        count, size = self.ds.count, self.ds.spec.image_size
        n = len(batch.labels)
        views_ = torch.empty(n, count, 3, size, size, dtype=torch.uint8, device=self.device)
        labels, params = batch.labels, batch.params
        if len(batch.crop_where):
            views_[batch.crop_where.to(self.device, non_blocking=True)] = batch.crops.to(
                self.device, non_blocking=True
            )
        if batch.lengths:
            images = self.decode(batch)
            failed = [i for i, im in enumerate(images) if im is None]
            if failed:  # through the CPU path here (skip_bad_images substitutes and counts)
                labels, params = labels.clone(), params.clone()
                for i in failed:
                    crops, label, _, rows, _, _, note = self.ds.on_cpu(
                        batch.keys[i], batch.paths[i], "the device decoder failed"
                    )
                    self.log([note])
                    pos = int(batch.where[i])
                    views_[pos] = crops.to(self.device)
                    labels[pos], params[pos] = label, rows
            ok = [i for i, im in enumerate(images) if im is not None]
            boxes, where = batch.boxes, batch.where
            if failed and ok:  # rare: the list indexes build host tensors
                boxes, where = boxes[ok], where[ok]
            if ok:
                crops = resize_crops([images[i] for i in ok], boxes, size)
                views_[where.to(self.device, non_blocking=True)] = crops
        out = (views_[:, 0], views_[:, 1], labels, batch.indices, params)
        return (*out, views_[:, 2:]) if count > 2 else out


class DecodedLoader:
    """A DataLoader of :class:`EncodedBatch` seen as CropViews' loader (decoded on the device)."""

    def __init__(self, loader: torch.utils.data.DataLoader, crops: DeviceCrops) -> None:
        self.loader, self.crops = loader, crops

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        return (self.crops(batch) for batch in self.loader)

    def __getattr__(self, name: str) -> Any:  # sampler, dataset, batch_size, ...
        return getattr(self.loader, name)
