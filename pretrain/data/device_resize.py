"""The resize of :mod:`pretrain.data.device_decode`: every crop of a decoded batch resized with
two batched matrix products, aten's antialiased bilinear uint8 kernel (``_upsample_bilinear2d_aa``)
with integer weights, so the crop of an image is the same whatever else is in its batch, on a CPU
or a GPU (the module doc of ``device_decode`` says how close to ``TF.resized_crop`` it is).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch

MAX_WEIGHT_BITS = 16  # integer weights: 255 * 2**16 + 2**15 < 2**24, exact in float32
PIXEL_BUDGET = 2**25  # padded source pixels per resize chunk (~400 MB of float32 on the device)


def axis_weights(
    start: torch.Tensor, length: torch.Tensor, size: int, extent: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Antialiased bilinear weights of crops ``[start, start + length)`` (each (V,), on the host)
    resized to ``size``, as dense integer-valued float32 matrices (V, size, extent) over a
    padded axis of ``extent`` pixels, and each crop's precision p (V,): the weights are
    round(w * 2**p). aten's ``_compute_index_ranges_weights`` and ``weights_precision`` rule
    (UpSampleKernel.cpp, the uint8 path), computed in float64, p capped at MAX_WEIGHT_BITS."""
    taps = 2 * math.ceil(max(extent / size, 1.0)) + 2  # >= any crop's window (length <= extent)
    scale = (length.double() / size).to(device, non_blocking=True)  # (V,)
    start = start.to(device, non_blocking=True)
    support = scale.clamp(min=1.0)  # (interp_size / 2) * scale, or 1 when upsampling
    inv = 1.0 / support
    center = scale[:, None] * (torch.arange(size, device=device, dtype=torch.float64) + 0.5)
    lo = (center - support[:, None] + 0.5).trunc().clamp(min=0)  # (V, S)
    hi = torch.minimum(
        (center + support[:, None] + 0.5).trunc(),
        length.to(device, non_blocking=True)[:, None].double(),
    )
    j = lo[..., None] + torch.arange(taps, device=device, dtype=torch.float64)  # (V, S, T)
    w = (1 - ((j - center[..., None] + 0.5) * inv[:, None, None]).abs()).clamp(min=0)
    w = torch.where(j < hi[..., None], w, 0.0)
    w = w / w.sum(-1, keepdim=True)
    w_max = w.flatten(1).amax(1)  # (V,)
    bits = torch.arange(22, device=device, dtype=torch.float64)
    stop = torch.floor(0.5 + w_max[:, None] * 2.0 ** (bits + 1)) >= 2**15  # aten's loop
    p = torch.where(stop.any(1), stop.double().argmax(1).double(), 22.0)
    p = p.clamp(max=MAX_WEIGHT_BITS)
    wi = torch.floor(w * 2.0 ** p[:, None, None] + 0.5).float()
    # every tap to its own column, those outside the window to spare columns past the extent:
    # unique indices, so index_put_ without accumulation (deterministic on CUDA as well)
    spare = extent + torch.arange(taps, device=device)
    col = torch.where(j < hi[..., None], (j + start.double()[:, None, None]).long(), spare)
    rows = torch.arange(w.shape[0] * size, device=device).view(w.shape[0], size, 1)
    dense = torch.zeros(w.shape[0], size, extent + taps, device=device)
    dense.view(-1).index_put_(((rows * (extent + taps) + col).view(-1),), wi.view(-1))
    return dense[..., :extent].contiguous(), p.float()


@contextlib.contextmanager
def full_fp32() -> Iterator[None]:
    """CUDA float32 matrix products without TF32 (the integer sums must stay exact), through the
    backend's own flag: it works whether the run set TF32 by the legacy or the new API."""
    matmul = torch.backends.cuda.matmul
    old = matmul.fp32_precision
    matmul.fp32_precision = "ieee"
    try:
        yield
    finally:
        matmul.fp32_precision = old


def _round_shift(x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """aten's ``(acc + 2**(p-1)) >> p`` saturated to uint8, on exact integer-valued floats."""
    return torch.floor((x + 2.0 ** (p - 1)) * 2.0 ** (-p)).clamp_(0, 255)


def resize_chunk(images: list[torch.Tensor], boxes: torch.Tensor, size: int) -> torch.Tensor:
    """:func:`resize_crops` for images padded into one tensor (two batched matmuls)."""
    n, k = boxes.shape[:2]
    device = images[0].device
    hp, wp = max(im.shape[1] for im in images), max(im.shape[2] for im in images)
    if all(tuple(im.shape[1:]) == (hp, wp) for im in images):
        buf = torch.stack(images).float()
    else:
        buf = torch.zeros(n, 3, hp, wp, device=device)
        for b, im in zip(buf, images, strict=True):
            b[:, : im.shape[1], : im.shape[2]] = im
    flat = boxes.reshape(-1, 4)
    wx, px = axis_weights(flat[:, 1], flat[:, 3], size, wp, device)  # (nK, S, Wp)
    wy, py = axis_weights(flat[:, 0], flat[:, 2], size, hp, device)  # (nK, S, Hp)
    with full_fp32():
        # horizontal pass for the K views at once: (n, 3 Hp, Wp) @ (n, Wp, K S)
        wxt = wx.view(n, k * size, wp).transpose(1, 2)
        t = torch.bmm(buf.view(n, 3 * hp, wp), wxt).view(n, 3, hp, k, size)
        t = _round_shift(t, px.view(n, 1, 1, k, 1))
        t = t.permute(0, 3, 2, 1, 4).reshape(n * k, hp, 3 * size)  # (nK, Hp, 3 S)
        out = torch.bmm(wy, t).view(n, k, size, 3, size)  # vertical pass
    out = _round_shift(out, py.view(n, k, 1, 1, 1))
    return out.permute(0, 1, 3, 2, 4).to(torch.uint8)


def upload(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``x`` (a small host tensor) on ``device`` without making the host wait: pinned first on
    CUDA, so the copy is asynchronous."""
    if device.type == "cuda":
        x = x.pin_memory()
    return x.to(device, non_blocking=True)


def resize_crops(
    images: list[torch.Tensor], boxes: torch.Tensor, size: int, budget: int = PIXEL_BUDGET
) -> torch.Tensor:
    """``TF.resized_crop(image, *box, [size, size], antialias=True)`` of every box of every
    image, batched: ``images`` J uint8 (3, H_j, W_j) tensors on one device, ``boxes`` (J, K, 4)
    int64 on the host -> (J, K, 3, size, size) uint8. Images are grouped by size into chunks of
    at most ``budget`` padded pixels (the result does not depend on the grouping)."""
    j, k = boxes.shape[:2]
    device = images[0].device if images else torch.device("cpu")
    out = torch.empty(j, k, 3, size, size, dtype=torch.uint8, device=device)
    if not j:
        return out
    order = sorted(range(j), key=lambda i: (images[i].shape[1], images[i].shape[2]))
    chunk: list[int] = []
    hp = wp = 0
    for i in [*order, None]:
        if i is not None:
            h, w = images[i].shape[1:]
            if not chunk or (len(chunk) + 1) * max(hp, h) * max(wp, w) <= budget:
                chunk.append(i)
                hp, wp = max(hp, h), max(wp, w)
                continue
        idx = torch.tensor(chunk)  # host metadata (image sizes), uploaded without a wait
        out[upload(idx, device)] = resize_chunk([images[c] for c in chunk], boxes[idx], size)
        if i is not None:
            chunk, hp, wp = [i], images[i].shape[1], images[i].shape[2]
    return out


# ---- the main process -------------------------------------------------------------------------
