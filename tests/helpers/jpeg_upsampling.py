"""libjpeg's two chroma upsamplings of one JPEG, on the CPU: the reference that nvjpeg's decode is
held to in ``tests/pretrain/data/test_device_decode.py``.

A 4:2:0 JPEG stores its two chroma planes at half the width and height; the decoder upsamples
them. libjpeg-turbo's default ("fancy", ``do_fancy_upsampling``) interpolates with a triangle
filter (``h2v2_fancy_upsample`` in jdsample.c); with fancy upsampling off it replicates each
chroma sample over its 2 x 2 pixels (``h2v2_merged_upsample``), and so does nvjpeg (NVIDIA DALI
has a ``jpeg_fancy_upsampling`` option for that reason). Neither PIL nor torchvision switches fancy
upsampling off, so the replicated decode is built here from PIL's YCbCr output: the luma plane of
the full-scale decode and the chroma planes of the 1/2-scale decode (libjpeg's DCT scaling gives
the chroma components their full 8x8 IDCT at that scale: their own samples, not upsampled).
Checked against libjpeg-turbo's own non-fancy decode (simplejpeg 1.9.0, ``fastupsample=True``)
on the test images of test_device_decode.py: at most one level apart, mean 0.001;
:func:`fancy_h2v2` of the half-scale planes equals the full-scale decode's chroma exactly (a test).
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, JpegImagePlugin

LUMA = np.array([0.299, 0.587, 0.114])  # JFIF's Y of R, G, B


def ycbcr_planes(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(full-scale YCbCr (H, W, 3), half-scale YCbCr (ceil(H/2), ceil(W/2), 3)) of a 4:2:0 colour
    JPEG, uint8, as libjpeg decodes them (PIL's ``draft``)."""
    full = Image.open(io.BytesIO(data))
    if full.mode != "RGB" or JpegImagePlugin.get_sampling(full) != 2:
        raise ValueError("want a 4:2:0 colour JPEG")
    w, h = full.size
    full.draft("YCbCr", full.size)
    half = Image.open(io.BytesIO(data))
    half.draft("YCbCr", (w // 2, h // 2))  # DCT scale 1/2
    if half.size != ((w + 1) // 2, (h + 1) // 2):
        raise ValueError(f"PIL did not decode at 1/2 scale: {half.size} from {full.size}")
    return np.asarray(full), np.asarray(half)


def to_rgb(ycc: np.ndarray) -> np.ndarray:
    """JFIF's YCbCr -> RGB (jdcolor.c's constants, rounded), (H, W, 3) -> (3, H, W) uint8."""
    y, cb, cr = (ycc[..., c].astype(np.float64) for c in range(3))
    cb, cr = cb - 128.0, cr - 128.0
    rgb = np.stack([y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb])
    return np.clip(np.round(rgb), 0, 255).astype(np.uint8)


def replicated(plane: np.ndarray, h: int, w: int) -> np.ndarray:
    """Each chroma sample over its 2 x 2 pixels, cut to (h, w): libjpeg without fancy upsampling."""
    return np.repeat(np.repeat(plane, 2, axis=0), 2, axis=1)[:h, :w]


def fancy_h2v2(plane: np.ndarray, h: int, w: int) -> np.ndarray:
    """libjpeg-turbo's ``h2v2_fancy_upsample``: each output sample is 9/16 of its own input sample,
    3/16 of each nearer neighbour and 1/16 of the diagonal one (edges replicated), rounded with
    the alternating +8 / +7 bias of jdsample.c; cut to (h, w)."""
    p = plane.astype(np.int64)
    above, below = np.vstack([p[:1], p[:-1]]), np.vstack([p[1:], p[-1:]])
    rows = np.empty((2 * p.shape[0], p.shape[1]), dtype=np.int64)
    rows[0::2], rows[1::2] = 3 * p + above, 3 * p + below  # the vertical 3:1 sums
    left = np.hstack([rows[:, :1], rows[:, :-1]])
    right = np.hstack([rows[:, 1:], rows[:, -1:]])
    out = np.empty((rows.shape[0], 2 * p.shape[1]), dtype=np.int64)
    out[:, 0::2] = (3 * rows + left + 8) >> 4
    out[:, 1::2] = (3 * rows + right + 7) >> 4
    return out[:h, :w].astype(np.uint8)


def decode_replicated(data: bytes) -> np.ndarray:
    """The JPEG decoded as libjpeg does with fancy upsampling off (as nvjpeg upsamples), (3, H, W)
    uint8."""
    full, half = ycbcr_planes(data)
    h, w = full.shape[:2]
    ycc = np.stack([full[..., 0], replicated(half[..., 1], h, w), replicated(half[..., 2], h, w)],
                   axis=-1)  # fmt: skip
    return to_rgb(ycc)


def luma(rgb: np.ndarray) -> np.ndarray:
    """JFIF's Y of a (3, H, W) RGB image, float64: what chroma upsampling barely touches."""
    return np.tensordot(LUMA, rgb.astype(np.float64), axes=1)
