"""Common corruptions of Hendrycks & Dietterich [0], batched in torch, and the CIFAR-10-C reader.

[0] D. Hendrycks, T. Dietterich, "Benchmarking Neural Network Robustness to Common Corruptions and
    Perturbations", ICLR 2019, https://arxiv.org/abs/1903.12261
[1] Their CIFAR-10-C generator, hendrycks/robustness @ ca36008,
    ``ImageNet-C/create_c/make_cifar_c.py``, whose severity parameters are used here unchanged.

On an image x in [0, 1] (per pixel and channel), with severity parameter c = PARAMS[kind][s-1]:

- gaussian_noise: clip(x + c·z, 0, 1), z ~ N(0, 1) i.i.d.
- shot_noise:     clip(Poisson(c·x) / c, 0, 1)  (c photons per unit intensity)
- gaussian_blur:  clip(G_c * x, 0, 1), G_c a Gaussian of std c pixels on each spatial axis, not
  across channels; [1] calls ``skimage.filters.gaussian(x, sigma=c, multichannel=True)``, whose
  defaults are mode='nearest' (edge pixels repeated) and truncate=4, i.e.
  ``scipy.ndimage.gaussian_filter(x, (c, c, 0), mode='nearest', truncate=4.0)``, reproduced here
  exactly: radius int(4c + 0.5), weights exp(-k²/2c²) normalised, replicate padding.
- contrast:       clip((x - m)·c + m, 0, 1), m the per-image, per-channel mean over pixels.

NOTE: the parameters are those of the 32-px CIFAR images and are applied in pixels at any size
(same noise std, same blur sigma in pixels). To reproduce CIFAR-10-C for a model evaluated at
another resolution, corrupt the 32-px images first and resize after, as CIFAR-10-C does.
NOTE: [1] stores ``np.uint8(255·y)`` (truncation); ``corrupt`` returns the float y unquantised.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import Dataset

from pretrain.data.datasets import missing_dataset

# [1]: gaussian_noise c, shot_noise c, gaussian_blur c, contrast c, for severities 1..5.
PARAMS: dict[str, tuple[float, ...]] = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),  # noise std
    "shot_noise": (500.0, 250.0, 100.0, 75.0, 50.0),  # photons per unit intensity
    "gaussian_blur": (0.4, 0.6, 0.7, 0.8, 1.0),  # blur std in pixels
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),  # contrast factor
}
TRUNCATE = 4.0  # kernel radius in stds (skimage/scipy default)
# The 19 files of CIFAR-10-C (and CIFAR-100-C): the 15 benchmark corruptions and 4 held-out ones.
CIFAR_C_CORRUPTIONS = (
    "gaussian_noise",
    "shot_noise",
    "impulse_noise",
    "defocus_blur",
    "glass_blur",
    "motion_blur",
    "zoom_blur",
    "snow",
    "frost",
    "fog",
    "brightness",
    "contrast",
    "elastic_transform",
    "pixelate",
    "jpeg_compression",
    "speckle_noise",
    "gaussian_blur",
    "spatter",
    "saturate",
)


def gaussian_kernel1d(sigma: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """scipy.ndimage's 1-D Gaussian: radius int(TRUNCATE·sigma + 0.5), weights summing to 1."""
    radius = int(TRUNCATE * sigma + 0.5)
    k = torch.arange(-radius, radius + 1, dtype=torch.float64)
    w = torch.exp(-0.5 * k**2 / sigma**2)
    return (w / w.sum()).to(dtype=dtype, device=device)


def gaussian_blur(images: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur of (N, C, H, W) per channel, edges replicated (scipy 'nearest')."""
    n, c, h, w = images.shape
    kernel = gaussian_kernel1d(sigma, images.dtype, images.device)
    r = kernel.numel() // 2
    x = F.pad(images.reshape(n * c, 1, h, w), (r, r, r, r), mode="replicate")  # (NC, 1, H+2r, W+2r)
    x = F.conv2d(x, kernel.view(1, 1, -1, 1))  # along H: (NC, 1, H, W+2r)
    x = F.conv2d(x, kernel.view(1, 1, 1, -1))  # along W: (NC, 1, H, W)
    return x.reshape(n, c, h, w)


def corrupt(
    images: torch.Tensor, kind: str, severity: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Corruption ``kind`` at ``severity`` (1..5) of [0] on a batch, with the parameters of [1].

    Args:
        images: float (N, C, H, W) in [0, 1], before any normalisation.
        kind: a key of :data:`PARAMS`.
        severity: 1 (mildest) to 5.
        generator: draws the noise (on the images' device); gaussian_noise draws one
            ``torch.randn(images.shape)``, shot_noise one ``torch.poisson``. None: the global RNG.

    Returns:
        float (N, C, H, W) in [0, 1], same dtype and device.
    """
    if kind not in PARAMS:
        raise ValueError(f"unknown corruption {kind!r}; use one of {', '.join(PARAMS)}")
    if not (isinstance(severity, int) and 1 <= severity <= 5):
        raise ValueError(f"severity must be an integer 1..5, got {severity!r}")
    if images.ndim != 4 or not images.is_floating_point():
        raise ValueError(
            f"expected a float (N, C, H, W) batch, got {tuple(images.shape)} {images.dtype}"
        )
    if images.numel() and (images.min() < 0 or images.max() > 1):
        raise ValueError(
            "images must lie in [0, 1]: corrupt the un-normalised images (before Normalize)"
        )
    c = PARAMS[kind][severity - 1]
    if kind == "gaussian_noise":
        z = torch.randn(images.shape, generator=generator, dtype=images.dtype, device=images.device)
        out = images + c * z
    elif kind == "shot_noise":
        out = torch.poisson(images * c, generator=generator) / c
    elif kind == "gaussian_blur":
        out = gaussian_blur(images, c)
    else:  # contrast
        m = images.mean(dim=(-2, -1), keepdim=True)  # (N, C, 1, 1)
        out = (images - m) * c + m
    return out.clamp(0.0, 1.0)


class Cifar10C(Dataset):
    """CIFAR-10-C [0]: ``root/CIFAR-10-C/<corruption>.npy`` (50000, 32, 32, 3) uint8, severity s at
    rows (s-1)·10000 : s·10000, and ``labels.npy`` (50000,). Items are (PIL image, int label).

    The .npy files are memory-mapped, so only the chosen severity is ever read. ``folder`` reads
    CIFAR-100-C, whose layout is the same (``folder="CIFAR-100-C"``).
    """

    def __init__(
        self, root: str, corruption: str, severity: int, *, folder: str = "CIFAR-10-C"
    ) -> None:
        if corruption not in CIFAR_C_CORRUPTIONS:
            raise ValueError(
                f"unknown CIFAR-C corruption {corruption!r}; use one of "
                f"{', '.join(CIFAR_C_CORRUPTIONS)}"
            )
        if not (isinstance(severity, int) and 1 <= severity <= 5):
            raise ValueError(f"severity must be an integer 1..5, got {severity!r}")
        base = Path(root).expanduser() / folder
        images_path, labels_path = base / f"{corruption}.npy", base / "labels.npy"
        if not (images_path.is_file() and labels_path.is_file()):
            raise missing_dataset(
                folder,
                base,
                f"  {images_path}  ((5·n, 32, 32, 3) uint8, severities 1..5 in row blocks of n)\n"
                f"  {labels_path}  ((5·n,) labels)",
                "download CIFAR-10-C.tar from https://zenodo.org/record/2535967 (CIFAR-100-C: "
                f"https://zenodo.org/record/3555552) and extract it in {base.parent}",
            )
        images = np.load(images_path, mmap_mode="r")
        labels = np.load(labels_path)
        if (
            images.ndim != 4
            or images.shape[-1] != 3
            or len(images) % 5
            or len(labels) != len(images)
        ):
            raise ValueError(
                f"{images_path} has shape {images.shape} and {labels_path} {labels.shape}; "
                "expected (5·n, H, W, 3) images and (5·n,) labels"
            )
        self.files = (images_path, labels_path)  # what a cache key must name
        n = len(images) // 5
        rows = slice((severity - 1) * n, severity * n)
        self.data = images[rows]  # memory-mapped (n, H, W, 3)
        self.targets = [int(v) for v in labels[rows]]

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int) -> tuple[Image.Image, int]:
        return Image.fromarray(np.asarray(self.data[i])), self.targets[i]
