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

from pretrain.data import jitter as jitter_ops
from pretrain.data.augment_params import (
    BLUR,
    FLIP,
    GRAY,
    NUM_COLUMNS,
    NUM_PARAMS,
    SIGMA,
    SOLARIZE,
    THETA,
    ViewSpec,
    blur_kernel_size,
)

UINT8_SCALE = 1.0 / 255.0  # v2.ToDtype(torch.float32, scale=True)


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


class Grid:
    """The per-size constants of :func:`resize_weights` on one device, built once (three
    ``arange``) and kept by :class:`Photometric` per image size: the output pixels' centres
    i + 0.5 and their mirror offsets out - 1 - 2 i, the source pixels' centres j + 0.5."""

    def __init__(self, size: int, out: int, device: torch.device) -> None:
        f32 = torch.float32
        self.centres = torch.arange(0.5, out, 1.0, device=device, dtype=f32)  # (out,)
        self.mirror = torch.arange(out - 1.0, -out, -2.0, device=device, dtype=f32)  # (out,)
        self.sources = torch.arange(0.5, size, 1.0, device=device, dtype=f32)  # (size,)
        self.low = torch.full((), 0.5, device=device, dtype=f32)  # also the rounding's + 0.5
        self.axes = torch.arange(2.0, device=device)  # (0, 1): a flip mirrors columns, not rows


def resize_weights(
    start: torch.Tensor,
    length: torch.Tensor,
    size: int,
    out: int,
    flip: torch.Tensor | None = None,
    grid: Grid | None = None,
) -> torch.Tensor:
    """(..., out, size) weights that resample pixels [start, start + length) of a side of ``size``
    pixels to ``out`` pixels, per crop (``start`` and ``length`` of any shape (...)), as
    ``F.interpolate(mode="bilinear", align_corners=False)`` does: source coordinate t - 0.5 with
    t = (i + 0.5) length / out clamped to [0.5, length - 0.5], and source pixel j weighing
    max(0, 1 - |j + 0.5 - t|) (the two-tap formula (1 - frac, frac) of floor(t - 0.5), bit for
    bit: every difference here is exact in float32). For length <= out (upsampling) this is also
    the antialiased filter of ``TF.resized_crop(..., antialias=True)``: its triangle support is one
    pixel there, and its weights renormalised at the crop's edges equal the clamp.

    ``flip`` (...) of 0/1: where 1 the output is mirrored (``TF.horizontal_flip`` of the
    resampled side, exactly: output i takes the weights of output out - 1 - i)."""
    grid = grid if grid is not None else Grid(size, out, start.device)
    length = length.to(torch.float32)[..., None]  # (..., 1)
    centres = (
        grid.centres if flip is None else torch.addcmul(grid.centres, flip[..., None], grid.mirror)
    )
    t = torch.clamp(centres * (length / out), grid.low, length - 0.5)  # (..., out)
    taps = grid.sources - start.to(torch.float32)[..., None]  # (..., size): j + 0.5 in the crop
    w = (taps[..., None, :] - t[..., None]).abs_()  # (..., out, size)
    return torch.rsub(w, 1.0).clamp_(min=0.0)


def crop_resize(
    x: torch.Tensor,
    box: torch.Tensor,
    flip: torch.Tensor | None = None,
    grid: Grid | None = None,
) -> torch.Tensor:
    """RandomResizedCrop's resize, batched: uint8-valued float images (N, C, H, S) and boxes
    (N, 4) = (top, left, h, w) with h <= H, w <= S -> (N, C, S, S) in channels-last memory,
    rounded to whole levels as the uint8 crop of stage 1 is (within 1 level of
    ``TF.resized_crop``, whose uint8 kernel uses fixed-point weights; tested). ``flip`` (N,) of
    0/1 mirrors an image horizontally through its weights (exact). Two batched matmuls with the
    rounding's + 0.5 inside, no host sync; ``grid``: :class:`Grid` (S, S), for square images."""
    n, c, h, s = x.shape
    grid = grid if grid is not None else Grid(s, s, x.device)
    if h == s:  # both sides' weights at once: (N, 2, S, S), rows then columns
        flips = None if flip is None else flip[:, None] * grid.axes
        w = resize_weights(box[:, 0:2], box[:, 2:4], s, s, flips, grid)
        wy, wx = w[:, 0], w[:, 1]
    else:
        wy = resize_weights(box[:, 0], box[:, 2], h, s)
        wx = resize_weights(box[:, 1], box[:, 3], s, s, flip, grid)
    # horizontal pass first, rounded to whole levels, then the vertical one: the order and the
    # intermediate rounding of torch's (and Pillow's) separable uint8 resampler
    y = torch.baddbmm(grid.low, x.reshape(n, c * h, s), wx.transpose(1, 2)).floor_()
    y = y.view(n, c, h, s).permute(0, 2, 3, 1).reshape(n, h, s * c)  # (N, H, S*C)
    z = torch.baddbmm(grid.low, wy, y).floor_()  # (N, S, S*C): channels last
    return z.view(n, s, s, c).permute(0, 3, 1, 2)


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
    crop boxes of stage 1 (``pretrain.data.views.CropViews``) -> normalised float views (N, 3,
    H, W) in channels-last memory (what the encoders take with ``train.channels_last``).

    Ops whose probability is 0 in the config are skipped altogether (a static choice); the
    deferred affine runs when ``affine`` (the config has one) and the rows carry theta.

    The ops run on channels-last pixels (N, H W, 3), and every linear colour map is a per-image
    3 x 3 matrix, so each is one batched product: the 1 / 255 of ``ToDtype`` goes into the first
    one (the jitter's first stage, else the grayscale's), and the normalisation into the last
    (the grayscale's, else one ``addcmul``) unless solarize comes between. The flip of a
    deferred crop goes into its resampling weights (:func:`crop_resize`); the blur, linear and
    mirror-symmetric, runs before the grayscale (the same maps in the other order). A per-image
    choice is a matrix or an exact ``lerp`` by the 0/1 flag: about 60 ops for MoCo v2's
    CIFAR views, whatever the batch size.

    ``compiled`` (``data.augment_compile``) runs each pass through ``torch.compile``: inductor
    fuses the small kernels of a pass into a few loops (README, "The input pipeline"); the
    values equal the eager ones up to float rounding (~1e-5, tested). The first pass of each
    batch shape compiles (~30 s on a CPU)."""

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
        buffer = lambda name, t: self.register_buffer(name, t, persistent=False)  # noqa: E731
        table, ident = jitter_ops.stage_table(UINT8_SCALE)
        cycle, sectors = jitter_ops.hue_constants()
        buffer("stages", table)
        buffer("ident", ident)
        buffer("cycle", cycle)
        buffer("sectors", sectors)
        # the last linear map: x A + shift, A = (I or the luma map) times the pending 1 / 255
        # and, folded in unless solarize comes after it, the normalisation's 1 / std
        self.fold = not solarize
        first = 1.0 if jitter else UINT8_SCALE  # the 1 / 255 not yet applied after the jitter
        inv = torch.tensor(std, dtype=torch.float64).reciprocal()
        cols = first * (inv if self.fold else torch.ones(3, dtype=torch.float64))
        buffer("keep", (torch.eye(3, dtype=torch.float64) * cols).float())
        buffer("luma", (jitter_ops.luma() * cols).float())
        buffer("scale", cols.float())  # without grayscale: x * scale + shift
        buffer("inv_std", inv.float())
        shift = -torch.tensor(mean, dtype=torch.float64) * inv
        buffer("shift", shift.float().view(1, 1, 3))
        self.grids: dict[tuple[int, torch.device], Grid] = {}
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

    def grid(self, size: int, device: torch.device) -> Grid:
        """The deferred crop's constants for ``size`` x ``size`` images, built once."""
        key = (size, device)
        if key not in self.grids:
            self.grids[key] = Grid(size, size, device)
        return self.grids[key]

    def forward(
        self, x: torch.Tensor | tuple[torch.Tensor, ...] | list[torch.Tensor], params: torch.Tensor
    ) -> torch.Tensor:
        """``x`` may be several batches (the two views) whose rows ``params`` are concatenated:
        they are concatenated straight into float32 (one op)."""
        if isinstance(x, (tuple, list)):
            first = x[0]
            buf = first.new_empty(
                (sum(v.shape[0] for v in x), *first.shape[1:]), dtype=torch.float32
            )
            x = torch.cat(x, out=buf)
        grid = self.grid(x.shape[-1], x.device)
        chunk = cpu_chunk(x.shape[-2], x.shape[-1])
        if x.device.type == "cpu" and x.shape[0] > chunk:  # keep intermediates in cache
            parts = zip(x.split(chunk), params.split(chunk), strict=True)
            return torch.cat([self.one_pass(xc, pc, grid) for xc, pc in parts])
        return self.one_pass(x, params, grid)

    def batch(
        self, x: torch.Tensor, params: torch.Tensor, grid: Grid | None = None
    ) -> torch.Tensor:
        """The ops on one batch; every op is per image, so splitting the batch changes nothing.
        Rows with a crop box (stage 1's columns after NUM_PARAMS) are cropped first."""
        params = params.to(torch.float32)
        n, c, hgt, wid = x.shape
        flip = params[:, FLIP] if self.hflip else None
        if params.shape[1] > NUM_PARAMS:  # the crop deferred by stage 1 (identity where done)
            x = x.to(torch.float32)
            if self.affine and params.shape[1] >= NUM_COLUMNS:  # deferred (or identity)
                x = affine_nearest(x, params[:, THETA : THETA + 6])
            x = crop_resize(x, params[:, NUM_PARAMS : NUM_PARAMS + 4], flip, grid)
            hgt = wid  # (N, 3, S, S), channels last
            pix = x.permute(0, 2, 3, 1).view(n, hgt * wid, c)
        else:
            pix = x.permute(0, 2, 3, 1).to(torch.float32, memory_format=torch.contiguous_format)
            if flip is not None:
                pix = torch.where(flip.view(n, 1, 1, 1) > 0.5, pix.flip(2), pix)
            pix = pix.view(n, hgt * wid, c)
        # pix: (N, P, 3) uint8 levels as floats
        if self.jitter:
            mb = jitter_ops.stage_matrices(params, self.stages, self.ident)
            pix = jitter_ops.color_jitter(pix, params, mb, self.cycle, self.sectors)
        if self.blur:
            pix = self.blurred(pix, params, hgt, wid)
        if self.gray:
            a = torch.lerp(self.keep, self.luma, params[:, GRAY].view(n, 1, 1))  # (N, 3, 3)
            pix = torch.baddbmm(self.shift, pix, a) if self.fold else torch.bmm(pix, a)
        elif self.fold:
            pix = torch.addcmul(self.shift, pix, self.scale)
        elif not self.jitter:
            pix = pix * UINT8_SCALE
        if not self.fold:  # solarize on [0, 1], then the normalisation
            pix = torch.where(per_view(params[:, SOLARIZE]) > 0.5, solarize(pix), pix)
            pix = torch.addcmul(self.shift, pix, self.inv_std)
        return pix.view(n, hgt, wid, c).permute(0, 3, 1, 2)

    def blurred(self, pix: torch.Tensor, params: torch.Tensor, hgt: int, wid: int) -> torch.Tensor:
        """GaussianBlur where the image's flag is set, on pixels (N, P, 3)."""
        n = pix.shape[0]
        images = pix.view(n, hgt, wid, 3).permute(0, 3, 1, 2)
        out = gaussian_blur(images, params[:, SIGMA], self.blur_kernel).permute(0, 2, 3, 1)
        keep = per_view(params[:, BLUR]).view(n, 1, 1, 1) > 0.5
        return torch.where(keep, out, images.permute(0, 2, 3, 1)).reshape(n, hgt * wid, 3)


def per_view(v: torch.Tensor) -> torch.Tensor:
    """(N,) -> (N, 1, 1), to broadcast over pixels (N, P, 3)."""
    return v.view(-1, 1, 1)
