"""Stage 1 of the input pipeline, per sample in the loader workers: only what must be per sample.

For each of the two views: the random affine (if configured) and the RandomResizedCrop to the
output size, as uint8, plus the view's photometric parameter row for stage 2
(``pretrain.data.augment.Photometric``, batched on the training device). Every draw of view v of
sample i in epoch e comes from ``augment_params.sample_rng(seed, e, i)`` (view 0's draws first), so
a resumed run, any number of workers and any number of ranks replay it exactly. Images already at
the output size leave their affine and crop to stage 2 too (:func:`defers_crop`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch.utils.data import Dataset
from torchvision.transforms.v2 import functional as TF

from pretrain.data import augment_params as ap
from pretrain.data.augment_params import ViewSpec


def read_image(path: str | Path) -> torch.Tensor:
    """Decode a file to a uint8 RGB tensor (3, H, W) with ``torchvision.io.decode_image`` (faster
    than PIL's open + convert + to-tensor for JPEG; see README_aug.md). Usable as an ImageFolder
    ``loader``."""
    data = torchvision.io.read_file(str(path))
    return torchvision.io.decode_image(data, mode=torchvision.io.ImageReadMode.RGB)


def as_uint8_tensor(image: Any) -> torch.Tensor:
    """PIL image or tensor -> plain uint8 tensor (3, H, W)."""
    if isinstance(image, torch.Tensor):
        image = image.as_subclass(torch.Tensor)
    else:
        image = TF.pil_to_tensor(image.convert("RGB") if image.mode != "RGB" else image)
    if image.shape[0] == 1:
        image = image.expand(3, -1, -1)
    return image


def crop_view(image: torch.Tensor, spec: ViewSpec, rng: np.random.Generator) -> torch.Tensor:
    """Affine (if configured) then RandomResizedCrop of a uint8 (3, H, W) image, as v2 does."""
    if spec.affine_degrees > 0 or spec.affine_translate > 0:
        angle, shift = ap.affine_params(
            rng,
            degrees=spec.affine_degrees,
            translate=spec.affine_translate,
            height=image.shape[-2],
            width=image.shape[-1],
        )
        image = TF.affine(image, angle=angle, translate=shift, scale=1.0, shear=[0.0, 0.0])
    top, left, h, w = ap.crop_box(
        rng, height=image.shape[-2], width=image.shape[-1], scale=spec.crop_scale
    )
    crop = image[:, top : top + h, left : left + w]
    if (h, w) == (spec.image_size, spec.image_size) or image.device.type != "cpu":
        size = [spec.image_size, spec.image_size]
        return TF.resized_crop(image, top, left, h, w, size, antialias=True)
    # TF.resized_crop's own call for uint8 on a CPU (native uint8 antialiased bilinear), without
    # its Python dispatch (about 0.5 ms per view; tested equal)
    out = F.interpolate(
        crop[None],
        size=(spec.image_size,) * 2,
        mode="bilinear",
        align_corners=False,
        antialias=True,
    )
    return out[0]


def view_params(spec: ViewSpec, rng: np.random.Generator) -> list[float]:
    """The view's photometric parameter row (NUM_PARAMS floats)."""
    return ap.photometric_row(rng, spec)


def defers_crop(image: torch.Tensor, spec: ViewSpec) -> bool:
    """True when stage 2 can do this image's affine and crop batched: the image is already at the
    output size (digits, CIFAR, STL-10 at 96 px), so the affine keeps that size and every
    RandomResizedCrop box upsamples (or is the identity), where the antialias filter reduces to
    plain bilinear (pretrain.data.augment.affine_nearest, crop_resize)."""
    return tuple(image.shape[-2:]) == (spec.image_size, spec.image_size)


def deferred_row(spec: ViewSpec, rng: np.random.Generator) -> list[float]:
    """Draws in :func:`crop_view`'s order (affine, crop box) then the photometric row, for an
    image left whole: [photometric..., top, left, h, w, theta...]."""
    size, theta = spec.image_size, ap.IDENTITY_THETA
    if spec.affine_degrees > 0 or spec.affine_translate > 0:
        angle, shift = ap.affine_params(
            rng,
            degrees=spec.affine_degrees,
            translate=spec.affine_translate,
            height=size,
            width=size,
        )
        theta = ap.inverse_affine_matrix(angle, shift)
    box = ap.crop_box(rng, height=size, width=size, scale=spec.crop_scale)
    return view_params(spec, rng) + [float(v) for v in box] + theta


class CropViews(Dataset):
    """Yields ``(view1, view2, label, index, params)``: two uint8 views (3, S, S) and their rows
    (2, NUM_COLUMNS): photometric parameters, the crop box, the affine's theta. The key is
    ``(epoch, index)`` from ResumableSampler; both views draw from ``sample_rng(seed, epoch,
    index)``, view 0 first.

    An image already at the output size S x S is returned whole with its affine and box, and
    stage 2 transforms the batch at once (:func:`defers_crop`); any other image is cropped here,
    and its row reads box (0, 0, S, S) and the identity theta, a no-op for stage 2.

    ``support_views`` > 0 (FNC's support set) adds a sixth item, the extra views (V, 3, S, S),
    with their rows after the two views' in ``params`` (2 + V rows): drawn from the same
    generator after views 0 and 1, so the two views are the same with or without them and a
    resume replays the support crops as it replays the views."""

    def __init__(self, base: Dataset, spec: ViewSpec, seed: int, support_views: int = 0) -> None:
        self.base, self.spec, self.seed, self.support_views = base, spec, seed, support_views

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, key: tuple[int, int]) -> tuple[Any, ...]:
        epoch, index = key
        image, label = self.base[index]
        return self.make(image, label, epoch, index)

    def make(self, image: Any, label: int, epoch: int, index: int) -> tuple[Any, ...]:
        """The item of ``(epoch, index)`` from its image (decoded elsewhere) and label."""
        image = as_uint8_tensor(image)
        rng = ap.sample_rng(self.seed, epoch, index)
        size = self.spec.image_size
        views, rows = [], []
        count = 2 + self.support_views
        if defers_crop(image, self.spec):
            for _ in range(count):
                rows.append(deferred_row(self.spec, rng))
                views.append(image)
        else:
            whole = [0.0, 0.0, float(size), float(size)] + ap.IDENTITY_THETA
            for _ in range(count):
                views.append(crop_view(image, self.spec, rng))
                rows.append(view_params(self.spec, rng) + whole)
        out = (views[0], views[1], label, index, torch.tensor(rows, dtype=torch.float32))
        if self.support_views:
            out = (*out, torch.stack(views[2:]))
        return out
