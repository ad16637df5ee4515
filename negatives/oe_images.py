"""Outlier-exposure images (Hendrycks et al., ICLR 2019) loaded once into memory: an image folder
or a .npy file of uint8 images such as the 300K random images used for CIFAR."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
OE_HELP = (
    "put there a folder of .png/.jpg/.jpeg images (searched recursively) or a .npy file of uint8 "
    "images (N, H, W, 3), e.g. 300K_random_images.npy of Hendrycks et al. (ICLR 2019) from "
    "https://people.eecs.berkeley.edu/~hendrycks/300K_random_images.npy"
)


def load_oe_images(path: Path, size: int, channels: int, cap: int, seed: int) -> torch.Tensor:
    """OE images as uint8 (M, channels, size, size), M <= cap: a subset seeded by ``seed``
    when there are more; each cropped to a centred square and resized (bilinear)."""
    if not path.exists():
        raise ValueError(f"oe_path {str(path)!r} does not exist: {OE_HELP}")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        files = [p for p in files if p.is_file()]
        n = len(files)
    elif path.suffix.lower() == ".npy":
        try:
            array = np.load(path, mmap_mode="r")  # reads only the chosen images below
        except (ValueError, OSError) as e:
            raise ValueError(f"oe_path {str(path)!r} is not a readable .npy file ({e})") from e
        if array.dtype != np.uint8 or array.ndim != 4 or array.shape[-1] != 3:
            raise ValueError(f"oe_path {str(path)!r} holds {array.dtype} {array.shape}; {OE_HELP}")
        n = array.shape[0]
    else:
        raise ValueError(f"oe_path {str(path)!r} is neither a folder nor a .npy file: {OE_HELP}")
    if n == 0:
        raise ValueError(f"oe_path {str(path)!r} holds no images: {OE_HELP}")
    keep = np.arange(n)
    if n > cap:
        keep = np.sort(np.random.default_rng(seed).choice(n, cap, replace=False))
    mode = {1: "L", 3: "RGB"}[channels]
    if path.is_dir():
        fitted = []
        for i in keep:  # setup time, once
            with Image.open(files[i]) as picture:
                fitted.append(np.asarray(fit_square(picture, mode, size)))
    else:
        chosen = np.asarray(array[keep])  # (M, H, W, 3)
        if chosen.shape[1:3] == (size, size) and channels == 3:  # e.g. 300K images at 32 px
            fitted = list(chosen)
        else:
            fitted = [np.asarray(fit_square(Image.fromarray(a), mode, size)) for a in chosen]
    images = torch.from_numpy(np.stack(fitted))  # (M, S, S, 3) or (M, S, S)
    return images[:, None] if channels == 1 else images.permute(0, 3, 1, 2).contiguous()


def fit_square(picture: Image.Image, mode: str, size: int) -> Image.Image:
    """The centred square of ``picture`` in ``mode`` (RGB or L), resized to size x size."""
    return ImageOps.fit(picture.convert(mode), (size, size), Image.Resampling.BILINEAR)
