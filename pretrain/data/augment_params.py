"""Vectorised draws of every random parameter of the MoCo v2 augmentation (numpy Generator).

The same functions serve one sample (``n=1``, in the loader workers, from a generator seeded by
(seed, epoch, index, view)) and a whole test batch (``n=100_000``). Each matches the distribution
of the torchvision v2 transform it replaces:

- crop: ``RandomResizedCrop.get_params`` (10 tries of area fraction ~ U(scale) and log aspect
  ratio ~ U(log ratio), the first box that fits, else the whole image clipped to the ratio range);
- jitter: ``RandomApply([ColorJitter(s, s, s, s/4)], p)``: brightness, contrast and saturation
  factors ~ U[max(0, 1-s), 1+s], hue ~ U[-s/4, s/4], op order uniform over the 4! = 24 orders;
- ``RandomGrayscale(p)``, ``RandomApply([GaussianBlur(k, (0.1, 2.0))], p)`` (sigma ~ U[0.1, 2]),
  ``RandomHorizontalFlip(p)`` and ``RandomSolarize(0.5, p)``: Bernoulli flags.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

# Columns of the per-view photometric parameter row (float32), read by pretrain.data.augment.
JITTER, BRIGHTNESS, CONTRAST, SATURATION, HUE, ORDER, GRAY, BLUR, SIGMA, FLIP, SOLARIZE = range(11)
NUM_PARAMS = 11
# Stage 1 appends the view's crop box (top, left, h, w) after the photometric columns. For an image
# already at the output size the crop is deferred to stage 2 (batched); a box of the whole image
# (0, 0, S, S) means stage 1 cropped it already (affine configured, or another image size).
TOP, LEFT, HEIGHT, WIDTH = range(NUM_PARAMS, NUM_PARAMS + 4)
# Then the RandomAffine's inverse matrix (6 floats, torchvision's layout), identity unless the
# affine is deferred with the crop (pretrain.data.augment.affine_nearest).
THETA = NUM_PARAMS + 4
NUM_COLUMNS = NUM_PARAMS + 4 + 6
IDENTITY_THETA = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
# ColorJitter's op order: row i is the i-th permutation of (brightness, contrast, saturation, hue).
ORDERS = np.array(list(itertools.permutations(range(4))), dtype=np.int64)  # (24, 4)
SIGMA_RANGE = (0.1, 2.0)  # MoCo v2 / SimCLR GaussianBlur
RATIO = (3.0 / 4.0, 4.0 / 3.0)  # RandomResizedCrop's default aspect-ratio range
CROP_TRIES = 10  # as RandomResizedCrop.get_params


@dataclass(frozen=True, kw_only=True)
class ViewSpec:
    """The augmentation of a training view, one record passed whole to every pipeline (stage 1's
    crops, stage 2's photometric ops, the per-sample torchvision reference, the device-resident
    views); built from the config's ``data.*`` keys by ``pretrain.data.pipeline.view_spec``.
    A probability or strength of 0 turns its op off."""

    image_size: int  # output side of the crop
    crop_scale: tuple[float, float]  # RandomResizedCrop scale
    affine_degrees: float = 0.0  # RandomAffine rotation
    affine_translate: float = 0.0  # RandomAffine translation fraction
    jitter_strength: float = 0.0  # ColorJitter(s, s, s, s / 4)
    jitter_prob: float = 0.0
    grayscale_prob: float = 0.0
    blur_prob: float = 0.0  # GaussianBlur, sigma in SIGMA_RANGE
    hflip_prob: float = 0.0
    solarize_prob: float = 0.0

    @property
    def affine(self) -> bool:
        return self.affine_degrees > 0 or self.affine_translate > 0


def blur_kernel_size(image_size: int) -> int:
    """About 10 % of the side, odd, at least 3 (SimCLR)."""
    return max(3, int(0.1 * image_size) // 2 * 2 + 1)


def view_rng(seed: int, epoch: int, index: int, view: int) -> np.random.Generator:
    """The generator of one view of one sample: a pure function of (seed, epoch, index, view).
    The trailing 2 keeps it apart from the sampler's (seed, epoch, 0, 1) stream."""
    return np.random.default_rng([seed, epoch, index, view, 2])


def sample_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator of one sample's two views, drawn in order (view 0's crop and row, then view
    1's): a pure function of (seed, epoch, index), so view v's draws are one of (seed, epoch,
    index, v). One generator per sample instead of one per view: seeding costs ~35 us. The
    trailing 3 keeps it apart from the sampler's stream and from :func:`view_rng`'s."""
    return np.random.default_rng([seed, epoch, index, 3])


def crop_boxes(
    rng: np.random.Generator,
    n: int,
    *,
    height: int,
    width: int,
    scale: tuple[float, float],
    ratio: tuple[float, float] = RATIO,
) -> np.ndarray:
    """``n`` RandomResizedCrop boxes ``(top, left, h, w)`` (int64, shape (n, 4)) of an image of
    ``height`` x ``width``, distributed as ``RandomResizedCrop.get_params``."""
    area = height * width
    u = rng.random((n, 2 * CROP_TRIES + 2))  # one draw: areas, log-ratios, top, left
    target = area * (scale[0] + (scale[1] - scale[0]) * u[:, :CROP_TRIES])
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = np.exp(lo + (hi - lo) * u[:, CROP_TRIES : 2 * CROP_TRIES])
    w = np.round(np.sqrt(target * aspect)).astype(np.int64)  # round half to even, as Python's
    h = np.round(np.sqrt(target / aspect)).astype(np.int64)
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = fits.argmax(axis=1)
    rows = np.arange(n)
    w, h = w[rows, first], h[rows, first]
    ftop, fleft, fh, fw = fallback(height, width, ratio)  # after CROP_TRIES misses
    hit = fits.any(axis=1)
    w, h = np.where(hit, w, fw), np.where(hit, h, fh)
    top = np.where(hit, np.floor(u[:, -2] * (height - h + 1)), ftop)
    left = np.where(hit, np.floor(u[:, -1] * (width - w + 1)), fleft)
    return np.stack([top.astype(np.int64), left.astype(np.int64), h, w], axis=1)


def crop_box(
    rng: np.random.Generator,
    *,
    height: int,
    width: int,
    scale: tuple[float, float],
    ratio: tuple[float, float] = RATIO,
) -> tuple[int, int, int, int]:
    """:func:`crop_boxes` for one box in plain Python (the per-sample call in the workers, ~10x
    cheaper than numpy on arrays of one row); same uniforms, same box (tested)."""
    u = rng.random(2 * CROP_TRIES + 2).tolist()
    area = height * width
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    for t in range(CROP_TRIES):
        target = area * (scale[0] + (scale[1] - scale[0]) * u[t])
        aspect = math.exp(lo + (hi - lo) * u[CROP_TRIES + t])
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = math.floor(u[-2] * (height - h + 1))
            return top, math.floor(u[-1] * (width - w + 1)), h, w
    top, left, h, w = fallback(height, width, ratio)
    return top, left, h, w


def fallback(height: int, width: int, ratio: tuple[float, float]) -> list[int]:
    """RandomResizedCrop's box after CROP_TRIES misses: central, the ratio clipped to range."""
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        w, h = int(round(height * max(ratio))), height
    else:
        w, h = width, height
    return [(height - h) // 2, (width - w) // 2, h, w]


def affine_params(
    rng: np.random.Generator, *, degrees: float, translate: float, height: int, width: int
) -> tuple[float, list[int]]:
    """One ``RandomAffine(degrees, translate=(t, t))`` draw: (angle, [tx, ty]) in pixels."""
    angle = float(rng.uniform(-degrees, degrees))
    tx = int(round(float(rng.uniform(-translate * width, translate * width))))
    ty = int(round(float(rng.uniform(-translate * height, translate * height))))
    return angle, [tx, ty]


def inverse_affine_matrix(angle: float, translate: list[int]) -> list[float]:
    """torchvision's ``_get_inverse_affine_matrix`` for RandomAffine's draws (centre (0, 0) =
    the image centre, scale 1, no shear), with the same float operations in the same order, so
    the float32 theta built from it is bit-equal to the one ``TF.affine`` builds."""
    rot, sx, sy = math.radians(angle), math.radians(0.0), math.radians(0.0)
    cx, cy = 0.0, 0.0
    tx, ty = float(translate[0]), float(translate[1])
    cos_sy, tan_sx, rot_minus_sy = math.cos(sy), math.tan(sx), rot - sy
    cx_plus_tx, cy_plus_ty = cx + tx, cy + ty
    a = math.cos(rot_minus_sy) / cos_sy
    b = -(a * tan_sx + math.sin(rot))
    c = math.sin(rot_minus_sy) / cos_sy
    d = math.cos(rot) - c * tan_sx
    m = [d / 1.0, -b / 1.0, 0.0, -c / 1.0, a / 1.0, 0.0]
    m[2] += cx - m[0] * cx_plus_tx - m[1] * cy_plus_ty
    m[5] += cy - m[3] * cx_plus_tx - m[4] * cy_plus_ty
    return m


def photometric_row(rng: np.random.Generator, spec: ViewSpec) -> list[float]:
    """:func:`photometric` for one row, in plain Python; same uniforms, same row (tested)."""
    u = rng.random(11).tolist()
    s = spec.jitter_strength
    lo, span = max(0.0, 1.0 - s), 1.0 + s - max(0.0, 1.0 - s)
    return [
        float(u[0] < spec.jitter_prob),  # JITTER
        lo + span * u[5],  # BRIGHTNESS
        lo + span * u[6],  # CONTRAST
        lo + span * u[7],  # SATURATION
        s / 4 * (2.0 * u[8] - 1.0),  # HUE
        float(min(math.floor(u[9] * 24), 23)),  # ORDER (24 = len(ORDERS))
        float(u[1] < spec.grayscale_prob),  # GRAY
        float(u[2] < spec.blur_prob),  # BLUR
        SIGMA_RANGE[0] + (SIGMA_RANGE[1] - SIGMA_RANGE[0]) * u[10],  # SIGMA
        float(u[3] < spec.hflip_prob),  # FLIP
        float(u[4] < spec.solarize_prob),  # SOLARIZE
    ]


def photometric(rng: np.random.Generator, n: int, spec: ViewSpec) -> np.ndarray:
    """``n`` rows of photometric parameters (float32, (n, NUM_PARAMS), columns named above).

    A factor whose op is off (probability 0 or strength 0) is drawn anyway and ignored, so the
    layout never changes; flags are 0.0/1.0."""
    s = spec.jitter_strength
    u = rng.random((n, 11))  # one draw: 5 flags, 4 jitter factors, the order, sigma
    lo, hi = max(0.0, 1.0 - s), 1.0 + s
    out = np.empty((n, NUM_PARAMS), dtype=np.float64)
    out[:, JITTER] = u[:, 0] < spec.jitter_prob
    out[:, GRAY] = u[:, 1] < spec.grayscale_prob
    out[:, BLUR] = u[:, 2] < spec.blur_prob
    out[:, FLIP] = u[:, 3] < spec.hflip_prob
    out[:, SOLARIZE] = u[:, 4] < spec.solarize_prob
    out[:, BRIGHTNESS : SATURATION + 1] = lo + (hi - lo) * u[:, 5:8]
    out[:, HUE] = s / 4 * (2.0 * u[:, 8] - 1.0)
    out[:, ORDER] = np.minimum(np.floor(u[:, 9] * len(ORDERS)), len(ORDERS) - 1)
    out[:, SIGMA] = SIGMA_RANGE[0] + (SIGMA_RANGE[1] - SIGMA_RANGE[0]) * u[:, 10]
    return out.astype(np.float32)
