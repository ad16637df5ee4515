"""Stage-1 parameter rows drawn on the training device, for ``data.resident: device``.

The loader path (``pretrain.data.views.deferred_row``) draws each view's parameters on the host from
a numpy generator, in this order: the RandomAffine's angle and shift (3 uniforms, only when an
affine is configured), the RandomResizedCrop box (``augment_params.crop_boxes``: 22 uniforms) and
the photometric row (``augment_params.photometric``: 11 uniforms). Here the same formulas run as
batched torch ops on a (n, UNIFORMS) tensor of uniforms drawn on the device, so a batch's rows
cost a few kernel launches and no host work. Given the same uniforms the rows are the loader's
rows exactly (tested: numpy's ``rng.random(36)`` fed to both), so the two paths share one
distribution; only the generator differs (torch's on the device, numpy's per sample on the host).
"""

from __future__ import annotations

import math

import torch

from pretrain.data import augment_params as ap
from pretrain.data.views import ViewSpec

AFFINE_U = 3  # angle, tx, ty
CROP_U = 2 * ap.CROP_TRIES + 2  # areas, log-ratios, top, left (augment_params.crop_boxes)
PHOTO_U = 11  # augment_params.photometric
UNIFORMS = AFFINE_U + CROP_U + PHOTO_U  # per view


def crop_boxes(
    u: torch.Tensor,
    *,
    height: int,
    width: int,
    scale: tuple[float, float],
    ratio: tuple[float, float] = ap.RATIO,
) -> torch.Tensor:
    """``augment_params.crop_boxes`` on uniforms ``u`` (n, CROP_U) float64: boxes (n, 4) =
    (top, left, h, w) as float64 whole numbers (RandomResizedCrop.get_params, Szegedy et al.
    2015's scale and aspect-ratio augmentation; first of 10 tries that fits, else the central
    fallback). torch.round rounds half to even, as numpy's and Python's round."""
    t = ap.CROP_TRIES
    target = (height * width) * (scale[0] + (scale[1] - scale[0]) * u[:, :t])
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = torch.exp(lo + (hi - lo) * u[:, t : 2 * t])
    w = torch.round(torch.sqrt(target * aspect))
    h = torch.round(torch.sqrt(target / aspect))
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = fits.to(torch.uint8).argmax(dim=1, keepdim=True)  # first True (0 if none)
    w, h = w.gather(1, first)[:, 0], h.gather(1, first)[:, 0]
    ftop, fleft, fh, fw = (float(v) for v in ap.fallback(height, width, ratio))
    hit = fits.any(dim=1)
    w = torch.where(hit, w, torch.full_like(w, fw))
    h = torch.where(hit, h, torch.full_like(h, fh))
    top = torch.where(hit, torch.floor(u[:, -2] * (height - h + 1)), torch.full_like(h, ftop))
    left = torch.where(hit, torch.floor(u[:, -1] * (width - w + 1)), torch.full_like(w, fleft))
    return torch.stack([top, left, h, w], dim=1)


def photometric(u: torch.Tensor, spec: ViewSpec) -> torch.Tensor:
    """``augment_params.photometric`` on uniforms ``u`` (n, PHOTO_U) float64: rows (n,
    NUM_PARAMS) float64, the same columns and formulas."""
    s = spec.jitter_strength
    lo, hi = max(0.0, 1.0 - s), 1.0 + s
    probs = (
        spec.jitter_prob,
        spec.grayscale_prob,
        spec.blur_prob,
        spec.hflip_prob,
        spec.solarize_prob,
    )
    # one comparison per column with a Python scalar: a tensor built from the list would be a
    # host-to-device copy every step
    flags = torch.stack([u[:, i] < p for i, p in enumerate(probs)], dim=1).to(u.dtype)
    factors = lo + (hi - lo) * u[:, 5:8]
    hue = s / 4 * (2.0 * u[:, 8] - 1.0)
    order = torch.clamp(torch.floor(u[:, 9] * len(ap.ORDERS)), max=len(ap.ORDERS) - 1)
    sigma = ap.SIGMA_RANGE[0] + (ap.SIGMA_RANGE[1] - ap.SIGMA_RANGE[0]) * u[:, 10]
    cols = [
        flags[:, 0],
        factors[:, 0],
        factors[:, 1],
        factors[:, 2],
        hue,
        order,
        flags[:, 1],
        flags[:, 2],
        sigma,
        flags[:, 3],
        flags[:, 4],
    ]
    return torch.stack(cols, dim=1)


def affine_theta(u: torch.Tensor, spec: ViewSpec, *, height: int, width: int) -> torch.Tensor:
    """``augment_params.affine_params`` + ``inverse_affine_matrix`` on uniforms ``u`` (n, 3)
    float64: torchvision's inverse matrix (n, 6) of RandomAffine(degrees, translate) with scale 1
    and no shear, i.e. [cos a, sin a, -(cos a tx + sin a ty), -sin a, cos a, sin a tx - cos a ty]
    (numpy's ``uniform(lo, hi)`` is ``lo + (hi - lo) * u``)."""
    d, t = spec.affine_degrees, spec.affine_translate
    angle = torch.deg2rad(-d + 2.0 * d * u[:, 0])
    tx = torch.round(-t * width + 2.0 * t * width * u[:, 1])
    ty = torch.round(-t * height + 2.0 * t * height * u[:, 2])
    cos, sin = torch.cos(angle), torch.sin(angle)
    # inverse_affine_matrix with a = d = cos, b = -sin, c = sin: m = [d, -b, 0, -c, a, 0], then
    # m[2] = -m[0] tx - m[1] ty and m[5] = -m[3] tx - m[4] ty
    return torch.stack([cos, sin, -cos * tx - sin * ty, -sin, cos, sin * tx - cos * ty], dim=1)


def view_rows(u: torch.Tensor, spec: ViewSpec, *, height: int, width: int) -> torch.Tensor:
    """Full stage-2 rows (n, NUM_COLUMNS) float32 from uniforms (n, UNIFORMS): the photometric
    columns, the crop box of an ``height`` x ``width`` image and the affine's theta (identity
    without an affine), laid out as ``views.deferred_row``."""
    u = u.to(torch.float64)
    affine = spec.affine_degrees > 0 or spec.affine_translate > 0
    if affine:
        theta = affine_theta(u[:, :AFFINE_U], spec, height=height, width=width)
    else:
        one, zero = torch.ones_like(u[:, 0]), torch.zeros_like(u[:, 0])
        theta = torch.stack([one, zero, zero, zero, one, zero], dim=1)  # ap.IDENTITY_THETA
    box = crop_boxes(
        u[:, AFFINE_U : AFFINE_U + CROP_U], height=height, width=width, scale=spec.crop_scale
    )
    photo = photometric(u[:, AFFINE_U + CROP_U :], spec)
    return torch.cat([photo, box, theta], dim=1).to(torch.float32)
