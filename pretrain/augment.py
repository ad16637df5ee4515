"""Stage 2 of the input pipeline: MoCo v2's photometric ops, batched on the training device.

Each image of the batch carries its own parameter row (``pretrain.augment_params``): colour jitter
(brightness, contrast, saturation, hue, in that image's own order of the 24), grayscale, Gaussian
blur with its own sigma, horizontal flip and solarize, then float conversion and normalisation,
as ``torchvision.transforms.v2`` applies them one image at a time (He et al. 2020, MoCo v2
``--aug-plus``; Chen et al. 2020, SimCLR appendix A). The formulas are torchvision's
(``transforms/v2/functional/_color.py`` and ``_misc.py``), written with per-image factors of shape
(N, 1, 1, 1).

Sync-free by construction: a per-image choice evaluates every candidate and selects with
``torch.where``; no boolean-mask indexing, ``nonzero`` or ``.item()``. NOTE: the ops run on float
images; torchvision's reference path runs them on uint8 and rounds after each op, so the two agree
within 1/255 per op, not bit for bit.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pretrain.augment_params import (
    BLUR,
    BRIGHTNESS,
    CONTRAST,
    FLIP,
    GRAY,
    HUE,
    JITTER,
    ORDER,
    ORDERS,
    SATURATION,
    SIGMA,
    SOLARIZE,
)


def blur_kernel_size(image_size: int) -> int:
    """About 10 % of the side, odd, at least 3 (SimCLR; the reference path's rule)."""
    return max(3, int(0.1 * image_size) // 2 * 2 + 1)


def per_image(v: torch.Tensor) -> torch.Tensor:
    """(N,) -> (N, 1, 1, 1), to broadcast over (N, C, H, W)."""
    return v.view(-1, 1, 1, 1)


def grayscale(x: torch.Tensor) -> torch.Tensor:
    """ITU-R 601-2 luma, torchvision's coefficients; (N, 3, H, W) -> (N, 1, H, W)."""
    r, g, b = x.unbind(dim=-3)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(-3)


def blend(x: torch.Tensor, other: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """``ratio * x + (1 - ratio) * other`` clamped to [0, 1] (torchvision ``_blend``)."""
    return (x * ratio + other * (1.0 - ratio)).clamp_(0.0, 1.0)


def adjust_brightness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return (x * per_image(factor)).clamp_(0.0, 1.0)


def adjust_contrast(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    mean = grayscale(x).mean(dim=(-3, -2, -1), keepdim=True)
    return blend(x, mean, per_image(factor))


def adjust_saturation(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return blend(x, grayscale(x), per_image(factor))


def rgb_to_hsv(x: torch.Tensor) -> torch.Tensor:
    """torchvision's ``_rgb_to_hsv`` (after Pillow's Convert.c); h, s, v in [0, 1]."""
    r, g, _ = x.unbind(dim=-3)
    minc, maxc = torch.aminmax(x, dim=-3)
    eqc = maxc == minc
    ones = torch.ones_like(maxc)
    s = (maxc - minc) / torch.where(eqc, ones, maxc)
    divisor = torch.where(eqc, ones, maxc - minc).unsqueeze(-3)
    rc, gc, bc = ((maxc.unsqueeze(-3) - x) / divisor).unbind(dim=-3)
    max_is_r, max_is_g = maxc == r, maxc == g
    hr = (bc - gc) * max_is_r
    hg = (2.0 + rc - bc) * (max_is_g & ~max_is_r)
    hb = (4.0 + gc - rc) * (~max_is_g & ~max_is_r)
    h = ((hr + hg + hb) / 6.0 + 1.0).fmod(1.0)
    return torch.stack((h, s, maxc), dim=-3)


# For sector i = floor(6h), which of (v, p, q, t) each of r, g, b takes (torchvision's table).
_HSV_SELECT = torch.tensor([[0, 2, 1, 1, 3, 0], [3, 0, 0, 2, 1, 1], [1, 1, 3, 0, 0, 2]])


def hsv_to_rgb(hsv: torch.Tensor, table: torch.Tensor | None = None) -> torch.Tensor:
    """torchvision's ``_hsv_to_rgb``; (N, 3, H, W) -> (N, 3, H, W). ``table``: ``_HSV_SELECT``
    already on the device (a module buffer), else it is copied there."""
    h, s, v = hsv.unbind(dim=-3)
    h6 = h * 6.0
    i = torch.floor(h6)
    f = h6 - i
    sector = i.to(torch.int64).remainder(6)  # (N, H, W)
    q = ((1.0 - s * f) * v).clamp(0.0, 1.0)
    t = ((1.0 - s + s * f) * v).clamp(0.0, 1.0)
    p = ((1.0 - s) * v).clamp(0.0, 1.0)
    vpqt = torch.stack((v, p, q, t), dim=-3)  # (N, 4, H, W)
    table = _HSV_SELECT.to(hsv.device) if table is None else table  # (3, 6)
    select = table[:, sector].movedim(0, -3)  # (N, 3, H, W)
    return vpqt.gather(-3, select)


def adjust_hue(
    x: torch.Tensor, shift: torch.Tensor, table: torch.Tensor | None = None
) -> torch.Tensor:
    """Rotate the hue by ``shift`` (N,) turns in [-0.5, 0.5] (torchvision ``adjust_hue``)."""
    h, s, v = rgb_to_hsv(x).unbind(dim=-3)
    h = (h + shift.view(-1, 1, 1)).remainder(1.0)
    return hsv_to_rgb(torch.stack((h, s, v), dim=-3), table)


def color_jitter(
    x: torch.Tensor,
    params: torch.Tensor,
    orders: torch.Tensor,
    hsv_select: torch.Tensor | None = None,
) -> torch.Tensor:
    """ColorJitter with per-image factors, each image in its own op order.

    Stage j applies op ``orders[order_i, j]`` to image i: all four candidates are evaluated on the
    whole batch and the right one picked per image with ``torch.where`` (no data-dependent
    shapes). ``orders`` is ``ORDERS`` as a tensor on ``x``'s device, (24, 4)."""
    order = orders[params[:, ORDER].long()]  # (N, 4): op index at each stage
    for stage in range(4):
        op = per_image(order[:, stage])
        out = adjust_brightness(x, params[:, BRIGHTNESS])
        out = torch.where(op == 1, adjust_contrast(x, params[:, CONTRAST]), out)
        out = torch.where(op == 2, adjust_saturation(x, params[:, SATURATION]), out)
        x = torch.where(op == 3, adjust_hue(x, params[:, HUE], hsv_select), out)
    return x


def gaussian_blur(x: torch.Tensor, sigma: torch.Tensor, kernel_size: int) -> torch.Tensor:
    """Gaussian blur with a per-image sigma (N,), torchvision's kernel and reflect padding; the
    2-d kernel is the outer product of two 1-d ones, so it runs as two grouped 1-d convolutions."""
    n, c, hgt, wid = x.shape
    lim = (kernel_size - 1) / (2.0 * 2.0**0.5)
    grid = torch.linspace(-lim, lim, kernel_size, dtype=x.dtype, device=x.device)
    kernel = torch.softmax(-((grid / sigma.view(-1, 1).to(x.dtype)) ** 2), dim=1)  # (N, k)
    kernel = kernel.repeat_interleave(c, dim=0, output_size=n * c)  # (N*C, k): one per channel
    pad = kernel_size // 2
    y = F.pad(x.reshape(1, n * c, hgt, wid), [pad, pad, pad, pad], mode="reflect")
    y = F.conv2d(y, kernel.view(n * c, 1, 1, kernel_size), groups=n * c)  # along the width
    y = F.conv2d(y, kernel.view(n * c, 1, kernel_size, 1), groups=n * c)  # along the height
    return y.view(n, c, hgt, wid)


def solarize(x: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    return torch.where(x >= threshold, 1.0 - x, x)


class Photometric(nn.Module):
    """uint8 views (N, 3, H, W) + parameter rows (N, NUM_PARAMS) -> normalised float views.

    Ops whose probability is 0 in the config are skipped altogether (a static choice)."""

    def __init__(
        self,
        *,
        jitter: bool,
        grayscale: bool,
        blur: bool,
        hflip: bool,
        solarize: bool = False,
        blur_kernel: int,
        mean: tuple[float, ...],
        std: tuple[float, ...],
    ) -> None:
        super().__init__()
        self.jitter, self.gray, self.blur, self.hflip = jitter, grayscale, blur, hflip
        self.solarize, self.blur_kernel = solarize, blur_kernel
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("orders", torch.from_numpy(ORDERS), persistent=False)
        self.register_buffer("hsv_select", _HSV_SELECT.clone(), persistent=False)

    def forward(self, x: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        x = x.to(torch.float32).mul_(1.0 / 255.0)  # (N, 3, H, W) in [0, 1], as v2.ToDtype
        params = params.to(torch.float32)
        flag = lambda col: per_image(params[:, col]) > 0.5  # noqa: E731  (N, 1, 1, 1) bool
        if self.jitter:
            x = torch.where(flag(JITTER), color_jitter(x, params, self.orders, self.hsv_select), x)
        if self.gray:
            x = torch.where(flag(GRAY), grayscale(x).expand_as(x), x)
        if self.blur:
            x = torch.where(flag(BLUR), gaussian_blur(x, params[:, SIGMA], self.blur_kernel), x)
        if self.hflip:
            x = torch.where(flag(FLIP), x.flip(-1), x)
        if self.solarize:
            x = torch.where(flag(SOLARIZE), solarize(x), x)
        return (x - self.mean) / self.std
