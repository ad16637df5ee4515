"""Stage 2 of the input pipeline: MoCo v2's photometric ops, batched on the training device.

Each image of the batch carries its own parameter row (``pretrain.data.augment_params``): colour
jitter (brightness, contrast, saturation, hue, in that image's own order of the 24), grayscale,
Gaussian blur with its own sigma, horizontal flip and solarize, then float conversion and
normalisation, as ``torchvision.transforms.v2`` applies them one image at a time (He et al. 2020,
MoCo v2 ``--aug-plus``; Chen et al. 2020, SimCLR appendix A). The formulas are torchvision's
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

from pretrain.data.augment_params import (
    BLUR,
    BRIGHTNESS,
    CONTRAST,
    FLIP,
    GRAY,
    HUE,
    JITTER,
    NUM_COLUMNS,
    NUM_PARAMS,
    ORDER,
    ORDERS,
    SATURATION,
    SIGMA,
    SOLARIZE,
    THETA,
    ViewSpec,
    blur_kernel_size,
)

# color_jitter reads the three blend factors as one slice of columns
assert (CONTRAST, SATURATION) == (BRIGHTNESS + 1, BRIGHTNESS + 2)


def per_image(v: torch.Tensor) -> torch.Tensor:
    """(N,) -> (N, 1, 1, 1), to broadcast over (N, C, H, W)."""
    return v.view(-1, 1, 1, 1)


def grayscale(x: torch.Tensor) -> torch.Tensor:
    """ITU-R 601-2 luma, torchvision's coefficients; (N, 3, H, W) -> (N, 1, H, W)."""
    r, g, b = x.unbind(dim=-3)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(-3)


def blend(x: torch.Tensor, other: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """``ratio * x + (1 - ratio) * other`` clamped to [0, 1] (torchvision ``_blend``), as one
    ``lerp`` from ``other`` to ``x`` (the same value up to float rounding)."""
    return torch.lerp(other.expand_as(x), x, ratio.expand_as(x)).clamp_(0.0, 1.0)


def adjust_hue(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Rotate the hue by ``shift`` (N,) turns in [-0.5, 0.5] (torchvision ``adjust_hue``).

    torchvision goes RGB -> HSV (``_rgb_to_hsv``, after Pillow's Convert.c), shifts h and goes
    back (``_hsv_to_rgb``). Fused here, with the same formulas: the chroma C = max - min and
    v = max are unchanged by the shift, and v s = C, so only the hue sector is computed,

        6 h = (g - b) / C if max = r, else 2 + (b - r) / C if max = g, else 4 + (r - g) / C

    (torchvision's tie order; C = 0 gives h = 0 and a gray pixel that stays put), and each
    channel comes back as v - C clamp(min(k, 4 - k), 0, 1), k = (n + 6 (h + shift)) mod 6 with
    n = 5, 3, 1 for r, g, b: torchvision's sector table in closed form. Equal to it up to float
    rounding, in about half the passes over the image of the two conversions."""
    r, g, b = x.unbind(dim=-3)
    minc, maxc = torch.aminmax(x, dim=-3)
    chroma = maxc - minc
    sector = torch.where(
        maxc == r,
        g - b,
        torch.where(maxc == g, (b - r).add_(chroma, alpha=2.0), (r - g).add_(chroma, alpha=4.0)),
    )
    h6 = sector.div_(torch.where(chroma == 0, torch.ones_like(chroma), chroma))
    h6 = h6.add_((6.0 * shift).view(-1, 1, 1)).unsqueeze(-3)  # (N, 1, H, W), any real
    n = torch.arange(5.0, 0.0, -2.0, dtype=x.dtype, device=x.device).view(3, 1, 1)  # 5, 3, 1
    k = (h6 + n).remainder_(6.0)  # (N, 3, H, W)
    ramp = k.sub_(2.0).abs_().neg_().add_(2.0).clamp_(0.0, 1.0)  # min(k, 4 - k), in place
    return ramp.mul_(chroma.unsqueeze(-3)).neg_().add_(maxc.unsqueeze(-3))


def blend_stage(x: torch.Tensor, factor: torch.Tensor, op: torch.Tensor) -> torch.Tensor:
    """One of brightness (op 0), contrast (1), saturation (2) per image, or none (any other op,
    e.g. hue): all three are ``clamp(f * x + (1 - f) * other)`` with ``other`` 0, the mean gray
    level or the gray image (torchvision ``_blend``), so one pass serves the whole batch; images
    whose op is none get f = 1, an exact identity."""
    op = per_image(op)
    f = torch.where((op >= 0) & (op <= 2), per_image(factor), torch.ones_like(per_image(factor)))
    gray = grayscale(x)  # (N, 1, H, W)
    mean = gray.mean(dim=(-3, -2, -1), keepdim=True)
    other = torch.where(op == 2, gray, torch.where(op == 1, mean, torch.zeros_like(mean)))
    return blend(x, other, f)


def color_jitter(
    x: torch.Tensor,
    params: torch.Tensor,
    orders: torch.Tensor,
) -> torch.Tensor:
    """ColorJitter with per-image factors, each image in its own op order of the 24.

    Hue (the costly op) runs once for the whole batch: the ops an image takes before its hue step
    run first, in 3 stages, then hue, then the ops after it, in 3 more stages; at each stage every
    image takes its own op or the identity (:func:`blend_stage`), so there are no data-dependent
    shapes. ``orders`` is ``ORDERS`` as a tensor on ``x``'s device, (24, 4)."""
    order = orders[params[:, ORDER].long()]  # (N, 4): op index at each position, hue = 3
    hue_at = (order == 3).long().argmax(dim=1)  # (N,) position of the hue step
    factors = params[:, BRIGHTNESS : SATURATION + 1]  # (N, 3); a slice: a Python list index
    # would build its index tensor on the host and copy it to the device every step
    none = torch.full_like(order[:, 0], -1)
    for pos in range(3):  # before hue: positions 0..2 where pos < hue_at
        op = torch.where(hue_at > pos, order[:, pos], none)
        x = blend_stage(x, factors.gather(1, op.clamp(0, 2)[:, None])[:, 0], op)
    x = adjust_hue(x, params[:, HUE])
    for pos in range(1, 4):  # after hue: positions 1..3 where pos > hue_at
        op = torch.where(hue_at < pos, order[:, pos], none)
        x = blend_stage(x, factors.gather(1, op.clamp(0, 2)[:, None])[:, 0], op)
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


def resize_weights(start: torch.Tensor, length: torch.Tensor, size: int, out: int) -> torch.Tensor:
    """(N, out, size) weights that resample pixels [start, start + length) of a side of ``size``
    pixels to ``out`` pixels, per image, as ``F.interpolate(mode="bilinear",
    align_corners=False)`` does: source coordinate (i + 0.5) * length / out - 0.5, clamped to
    the crop. For length <= out (upsampling) this is also the antialiased filter of
    ``TF.resized_crop(..., antialias=True)``: its triangle support is one pixel there, and its
    weights renormalised at the crop's edges equal the clamp."""
    dev = start.device
    dst = torch.arange(out, device=dev, dtype=torch.float32)
    length = length.to(torch.float32)[:, None]  # (N, 1)
    src = ((dst + 0.5) * (length / out) - 0.5).clamp_(min=0.0)  # (N, out)
    i0 = src.floor()
    lam = (src - i0)[..., None]  # (N, out, 1)
    i0 = torch.minimum(i0, length - 1.0)
    i1 = torch.minimum(i0 + 1.0, length - 1.0)
    base = start.to(torch.float32)[:, None, None]
    cols = torch.arange(size, device=dev, dtype=torch.float32)  # (size,)
    return (cols == base + i0[..., None]) * (1.0 - lam) + (cols == base + i1[..., None]) * lam


def crop_resize(x: torch.Tensor, box: torch.Tensor) -> torch.Tensor:
    """RandomResizedCrop's resize, batched: uint8-valued float images (N, C, S, S) and boxes
    (N, 4) = (top, left, h, w) with h, w <= S -> (N, C, S, S), rounded to whole levels as the
    uint8 crop of stage 1 is (within 1 level of ``TF.resized_crop``, whose uint8 kernel uses
    fixed-point weights; tested). Two batched matmuls, no host sync."""
    n, c, h, s = x.shape
    wy = resize_weights(box[:, 0], box[:, 2], h, s)  # (N, S, H)
    wx = resize_weights(box[:, 1], box[:, 3], s, s)  # (N, S, W)
    # horizontal pass first, rounded to whole levels, then the vertical one: the order and the
    # intermediate rounding of torch's (and Pillow's) separable uint8 resampler
    y = torch.bmm(x.reshape(n, c * h, s), wx.transpose(1, 2)).add_(0.5).floor_()  # (N, C*H, S)
    y = y.view(n, c, h, s).transpose(1, 2).reshape(n, h, c * s)
    z = torch.bmm(wy, y).add_(0.5).floor_().clamp_(0.0, 255.0)  # (N, S, C*S)
    return z.view(n, s, c, s).transpose(1, 2).contiguous()


def antialias_weights(
    start: torch.Tensor, length: torch.Tensor, size: int, out: int
) -> torch.Tensor:
    """(N, out, size) weights of torch's antialiased bilinear resize (``F.interpolate(...,
    antialias=True)``, Pillow's triangle filter; ``_compute_indices_weights_aa``) of pixels
    [start, start + length) of a side of ``size`` pixels to ``out`` pixels, per image: output i
    has centre c = (i + 0.5) L / out in the crop, support r = max(L / out, 1), and source pixel j
    of the crop weighs max(0, 1 - |j + 0.5 - c| / r), normalised over the crop. For L <= out this
    is :func:`resize_weights` (bilinear, clamped at the crop's edges)."""
    dev = start.device
    length = length.to(torch.float32)[:, None, None]  # (N, 1, 1)
    scale = length / out
    centre = (torch.arange(out, device=dev, dtype=torch.float32)[None, :, None] + 0.5) * scale
    j = torch.arange(size, device=dev, dtype=torch.float32) - start.to(torch.float32)[:, None, None]
    w = (1.0 - (j + 0.5 - centre).abs_() / scale.clamp(min=1.0)).clamp_(min=0.0)
    w = w * ((j >= 0) & (j < length))  # (N, out, size)
    return w / w.sum(dim=2, keepdim=True)


def fixed_point(w: torch.Tensor) -> torch.Tensor:
    """Weights (N, out, size) rounded as torch's uint8 antialiased resampler rounds them (after
    Pillow-SIMD): to multiples of 2^-p, p the largest precision (<= 22) at which the largest
    weight of the image's axis still fits 15 bits. The products with uint8 values and their sums
    stay exact in float32, so the result is that kernel's, bit for bit (tested)."""
    wmax = w.amax(dim=(1, 2)).to(torch.float64)  # (N,)
    bits = torch.arange(23, dtype=torch.float64, device=w.device)
    stop = torch.floor(0.5 + wmax[:, None] * torch.exp2(bits + 1)) >= 2.0**15
    p = torch.where(
        stop.any(dim=1),
        stop.to(torch.uint8).argmax(dim=1).to(torch.float64),
        torch.full_like(wmax, 22.0),
    )
    scale = torch.exp2(p).view(-1, 1, 1)
    return (torch.floor(w.to(torch.float64) * scale + 0.5) / scale).to(torch.float32)


def crop_resize_to(x: torch.Tensor, box: torch.Tensor, out: int) -> torch.Tensor:
    """RandomResizedCrop of a batch of any one size: uint8-valued float images (N, C, H, W) and
    boxes (N, 4) = (top, left, h, w) -> (N, C, out, out), up- or downsampling with the
    antialiased filter (:func:`antialias_weights`) in fixed point (:func:`fixed_point`) and in
    torch's uint8 order (horizontal pass, round, vertical pass, round): stage 1's
    ``F.interpolate(uint8, antialias=True)`` on a CPU bit for bit (tested). Two batched matmuls."""
    n, c, h, w = x.shape
    wy = fixed_point(antialias_weights(box[:, 0], box[:, 2], h, out))  # (N, out, H)
    wx = fixed_point(antialias_weights(box[:, 1], box[:, 3], w, out))  # (N, out, W)
    y = torch.bmm(x.reshape(n, c * h, w), wx.transpose(1, 2)).add_(0.5).floor_().clamp_(0, 255)
    y = y.view(n, c, h, out).transpose(1, 2).reshape(n, h, c * out)
    z = torch.bmm(wy, y).add_(0.5).floor_().clamp_(0.0, 255.0)  # (N, out, C*out)
    return z.view(n, out, c, out).transpose(1, 2).contiguous()


def affine_nearest(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """RandomAffine's resampling, batched: images (N, C, H, W) float and per-image inverse
    matrices (N, 6) in torchvision's layout -> (N, C, H, W): ``TF.affine``'s grid (its
    ``_affine_grid``, the same float32 operations) and nearest ``grid_sample`` with zeros
    outside, i.e. fill 0, as ``v2.RandomAffine`` does; the identity theta is an exact no-op."""
    n, c, h, w = x.shape
    dev, dt = x.device, torch.float32
    base = torch.empty(1, h, w, 3, dtype=dt, device=dev)
    base[..., 0].copy_(torch.linspace((1.0 - w) * 0.5, (w - 1.0) * 0.5, steps=w, device=dev))
    base[..., 1].copy_(
        torch.linspace((1.0 - h) * 0.5, (h - 1.0) * 0.5, steps=h, device=dev).unsqueeze_(-1)
    )
    base[..., 2].fill_(1)
    # torchvision divides by torch.tensor([0.5 * w, 0.5 * h]): the same float32 divisors, built
    # on the device in one op (a 2-step linspace is exactly its ends; a tensor from a Python list
    # is a host-to-device copy every step)
    scale = torch.linspace(0.5 * w, 0.5 * h, steps=2, dtype=dt, device=dev)
    rescaled = theta.to(dt).view(n, 2, 3).transpose(1, 2).div(scale)  # (N, 3, 2)
    grid = base.view(1, h * w, 3).expand(n, -1, -1).bmm(rescaled).view(n, h, w, 2)
    return F.grid_sample(x, grid, mode="nearest", padding_mode="zeros", align_corners=False)


def solarize(x: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    return torch.where(x >= threshold, 1.0 - x, x)


CPU_PIXELS = 1 << 18  # pixels per pass on a CPU, to keep intermediates in cache: 224 px at batch
# 128 ran ~2x slower in one pass, and 16 images per pass at 32 px ran 2.2x slower than 256 (the ops
# are ~90 small kernels per pass, so a pass must hold enough pixels to amortise them)
CPU_MIN_CHUNK = 16


def cpu_chunk(height: int, width: int) -> int:
    """Images per pass on a CPU: about ``CPU_PIXELS`` pixels, at least ``CPU_MIN_CHUNK`` images
    (16 at 96 and 224 px as before, 256 at 32 px, 1024 at 16 px)."""
    return max(CPU_MIN_CHUNK, CPU_PIXELS // (height * width))


class Photometric(nn.Module):
    """uint8 views (N, 3, H, W) + parameter rows (N, NUM_PARAMS), or (N, NUM_COLUMNS) with the
    crop boxes of stage 1 (``pretrain.data.views.CropViews``) -> normalised float views.

    Ops whose probability is 0 in the config are skipped altogether (a static choice); the
    deferred affine runs when ``affine`` (the config has one) and the rows carry theta.

    ``compiled`` (``data.augment_compile``) runs each pass through ``torch.compile``: inductor
    fuses the ~90 small kernels of a pass into a few loops, ~3x less CPU per image at 32 px
    (README, "The input pipeline"); the values equal the eager ones up to float rounding (~1e-5,
    tested). The first pass of each batch shape compiles (~30 s on a CPU)."""

    def __init__(
        self,
        *,
        jitter: bool,
        grayscale: bool,
        blur: bool,
        hflip: bool,
        solarize: bool = False,
        affine: bool = False,
        blur_kernel: int,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        compiled: bool = False,
    ) -> None:
        super().__init__()
        self.jitter, self.gray, self.blur, self.hflip = jitter, grayscale, blur, hflip
        self.solarize, self.blur_kernel, self.affine = solarize, blur_kernel, affine
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("orders", torch.from_numpy(ORDERS), persistent=False)
        self.compiled = compiled
        self.one_pass = torch.compile(self.batch) if compiled else self.batch

    @classmethod
    def for_views(
        cls, spec: ViewSpec, mean: tuple[float, ...], std: tuple[float, ...], compiled: bool = False
    ) -> Photometric:
        """Stage 2 of the views ``spec`` describes: the ops after the crop, those whose
        probability or strength is 0 left out."""
        return cls(
            jitter=spec.jitter_strength > 0 and spec.jitter_prob > 0,
            grayscale=spec.grayscale_prob > 0,
            blur=spec.blur_prob > 0,
            hflip=spec.hflip_prob > 0,
            solarize=spec.solarize_prob > 0,
            affine=spec.affine,
            blur_kernel=blur_kernel_size(spec.image_size),
            mean=tuple(mean),
            std=tuple(std),
            compiled=compiled,
        )

    def forward(self, x: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        chunk = cpu_chunk(x.shape[-2], x.shape[-1])
        if x.device.type == "cpu" and x.shape[0] > chunk:  # keep intermediates in cache
            parts = zip(x.split(chunk), params.split(chunk), strict=True)
            return torch.cat([self.one_pass(xc, pc) for xc, pc in parts])
        return self.one_pass(x, params)

    def batch(self, x: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        """The ops on one batch; every op is per image, so splitting the batch changes nothing.
        Rows with a crop box (stage 1's columns after NUM_PARAMS) are cropped first."""
        params = params.to(torch.float32)
        x = x.to(torch.float32)
        if self.affine and params.shape[1] >= NUM_COLUMNS:  # deferred by stage 1 (or identity)
            x = affine_nearest(x, params[:, THETA : THETA + 6])
        if params.shape[1] > NUM_PARAMS:  # the crop deferred by stage 1 (identity where done)
            x = crop_resize(x, params[:, NUM_PARAMS : NUM_PARAMS + 4])
        x = x.mul_(1.0 / 255.0)  # (N, 3, H, W) in [0, 1], as v2.ToDtype
        flag = lambda col: per_image(params[:, col]) > 0.5  # noqa: E731  (N, 1, 1, 1) bool
        if self.jitter:
            x = torch.where(flag(JITTER), color_jitter(x, params, self.orders), x)
        if self.gray:
            x = torch.where(flag(GRAY), grayscale(x).expand_as(x), x)
        if self.blur:
            x = torch.where(flag(BLUR), gaussian_blur(x, params[:, SIGMA], self.blur_kernel), x)
        if self.hflip:
            x = torch.where(flag(FLIP), x.flip(-1), x)
        if self.solarize:
            x = torch.where(flag(SOLARIZE), solarize(x), x)
        return (x - self.mean) / self.std
