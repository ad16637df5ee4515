"""``outliers``: replace part of each batch by synthetic outliers (rotations, CutPaste, OE).

[0] FIRM, the FIRM paper (Sec. 3, eq. 2): synthetic outliers made from the in-distribution (ID)
    images by shifting transformations, each an anchor whose only positive is its other view.
[1] Batches as in https://github.com/Willtl/firm/blob/cb7556e/data.py (``SyntheticOutlierDataset``:
    the 3 rotations of every ID image are items of their own with labels 1..3, both views are
    augmentations of the same rotated image, and with ``--oe`` an outlier slot gets a random 300K
    image instead), re-derived from [0] (Lunardi et al. 2025, FIRM, Sec. 3, eq. 2).
[2] CutPaste: Li, Sohn, Yoon, Pfister, CVPR 2021, https://arxiv.org/abs/2104.04015 (Sec. 3.1):
    cut a rectangle of area ratio in [0.02, 0.15] and aspect ratio (w / h) in [0.3, 3.3], paste it
    at a random location of the same image.
[3] Outlier exposure: Hendrycks, Mazeika, Dietterich, ICLR 2019, https://arxiv.org/abs/1812.04606;
    their 300K random images are https://people.eecs.berkeley.edu/~hendrycks/300K_random_images.npy

Each step, for a batch of N images (two views x1, x2 and labels y):

    m = floor(ratio * N + 1/2);  S = randperm(N)[:m]        slots replaced (exactly m per batch)
    kind_s ~ U(kinds) per slot s in S
    rotate:   x1_s, x2_s <- rot90(x1_s, r), rot90(x2_s, r);  r ~ U(angles / 90), one per slot
              y_s <- rotation_label(r) = -1 - r ("separate") or OUTLIER_LABEL ("shared")
    cutpaste: x_s[dst box] <- x_s[src box], an independent box per view;  y_s <- OUTLIER_LABEL
    oe:       x1_s, x2_s <- two crops + flips of one random OE image;  y_s <- OUTLIER_LABEL

Rotations are counter-clockwise, as PIL's ``Image.rotate`` in [1]. Randomness comes from the global
torch RNG of the batch's device, so a checkpoint that saves the RNG replays the same outliers.
Shapes: x1, x2 (N, C, H, W) normalised images, y (N,) long; outputs have the same shapes.

NOTE (deviations and choices):
- We act after augmentation, on the views. Crops, colour jitter and a 180 deg turn commute with
  it; for 90/270 deg a horizontally flipped view becomes a vertical flip of the rotated image
  (rot90 o hflip = vflip o rot90), where [1] flips the rotated image horizontally.
- The outlier fraction is exact per batch; in [1] it is binomial around 3/4 (3 rotations per ID
  image, shuffled), which the default ``ratio=0.75`` matches in expectation.
- CutPaste: no colour jitter or rotation of the patch (optional in [2]); the paste location
  differs from the source location, as FIRM's ``util.CutPaste`` (except on a 1-pixel image);
  sizes are rounded to whole pixels and at least 1.
- ``rotation_labels="separate"`` with other kinds is refused: 90 deg has label -2 =
  OUTLIER_LABEL, which CutPaste and OE outliers also carry.
- OE images are kept on the batch's device: oe_max_images * C * size^2 bytes (50,000 CIFAR-size
  images: 154 MB; at 224 px lower the cap). Under DDP every rank draws the same slots and crop
  parameters (shared RNG) but its own OE images, so ranks do not enqueue copies of one image.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, get_args

import torch
import torch.nn.functional as F

from negatives.base import NegativeStrategy, strategies
from negatives.oe_images import OE_HELP, load_oe_images
from negmine_core.conventions import OUTLIER_LABEL, rotation_label
from negmine_core.step import ONE_PROCESS, Batch, SetupContext, StepContext

RotationLabels = Literal["separate", "shared"]  # one class per rotation, or one for all

KINDS = ("rotate", "cutpaste", "oe")


def num_outliers(ratio: float, batch_size: int) -> int:
    """Slots replaced in a batch: round(ratio * N), halves rounded up."""
    return math.floor(ratio * batch_size + 0.5)


def turn_index(
    height: int, width: int, choices: Sequence[int], device: torch.device | None = None
) -> torch.Tensor:
    """(len(choices), H * W): for each quarter-turn count of ``choices``, the flat pixel that each
    output pixel of a turned (H, W) image reads (``torch.rot90`` of the pixel numbers)."""
    pixels = torch.arange(height * width, device=device).reshape(height, width)
    return torch.stack([torch.rot90(pixels, r, dims=(0, 1)).reshape(-1) for r in choices])


def turn(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Each image of x (M, C, H, W) with its pixels read at ``index`` (M, H * W), rows of
    :func:`turn_index`: each image turned counter-clockwise by its row's quarter turns, by one
    gather (90 and 270 deg need square images)."""
    M, C, H, W = x.shape
    return x.reshape(M, C, H * W).gather(2, index[:, None].expand(M, C, H * W)).reshape(x.shape)


@dataclass
class Boxes:
    """CutPaste rectangles, one per image, all (M,): the sampled area ratio and aspect (w / h),
    float64, then the size in pixels and the top-left corners of source and destination, long."""

    area: torch.Tensor
    aspect: torch.Tensor
    h: torch.Tensor
    w: torch.Tensor
    src_top: torch.Tensor
    src_left: torch.Tensor
    dst_top: torch.Tensor
    dst_left: torch.Tensor


def sample_boxes(
    n: int,
    height: int,
    width: int,
    area_range: Sequence[float],
    aspect_range: Sequence[float],
    device: torch.device,
) -> Boxes:
    """Area ratio ~ U(area_range), aspect ~ logU(aspect_range), w = round(sqrt(a H W r)),
    h = round(sqrt(a H W / r)); corners uniform, the destination uniform over the others."""
    u = torch.rand(n, 5, dtype=torch.float64, device=device)  # one draw per sample and quantity
    lo, hi = area_range
    area = lo + (hi - lo) * u[:, 0]
    lr0, lr1 = math.log(aspect_range[0]), math.log(aspect_range[1])
    aspect = torch.exp(lr0 + (lr1 - lr0) * u[:, 1])
    pixels = area * (height * width)
    w = torch.sqrt(pixels * aspect).round().long().clamp(1, width)
    h = torch.sqrt(pixels / aspect).round().long().clamp(1, height)
    rows, cols = height - h + 1, width - w + 1  # possible top-left corners per axis
    src_top, src_left = (u[:, 2] * rows).long(), (u[:, 3] * cols).long()
    # The destination is uniform over the rows * cols - 1 corners other than the source's.
    src = src_top * cols + src_left
    dst = (u[:, 4] * (rows * cols - 1)).long()
    dst = torch.minimum(dst + (dst >= src).long(), rows * cols - 1)
    return Boxes(area, aspect, h, w, src_top, src_left, dst // cols, dst % cols)


def paste(x: torch.Tensor, boxes: Boxes) -> torch.Tensor:
    """x (M, C, H, W) with each image's source rectangle copied onto its destination rectangle,
    by one gather over per-image index grids (no loop over images)."""
    M, C, H, W = x.shape
    ys = torch.arange(H, device=x.device)[None, :]  # (1, H)
    xs = torch.arange(W, device=x.device)[None, :]  # (1, W)
    top, left = boxes.dst_top[:, None], boxes.dst_left[:, None]  # (M, 1)
    in_y = (ys >= top) & (ys < top + boxes.h[:, None])  # (M, H)
    in_x = (xs >= left) & (xs < left + boxes.w[:, None])  # (M, W)
    src_y = ys - top + boxes.src_top[:, None]  # (M, H) rows read inside the box
    src_x = xs - left + boxes.src_left[:, None]  # (M, W) columns read inside the box
    inside = in_y[:, :, None] & in_x[:, None, :]  # (M, H, W)
    index = torch.where(inside, src_y[:, :, None] * W + src_x[:, None, :], ys[:, :, None] * W + xs)
    index = index.reshape(M, 1, H * W)  # flat pixel read by each output pixel
    return x.reshape(M, C, H * W).gather(2, index.expand(M, C, H * W)).reshape(M, C, H, W)


def cutpaste(
    x: torch.Tensor,
    area_range: Sequence[float] = (0.02, 0.15),
    aspect_range: Sequence[float] = (0.3, 3.3),
) -> tuple[torch.Tensor, Boxes]:
    """CutPaste [2] of every image of x (M, C, H, W); returns the images and the boxes used."""
    boxes = sample_boxes(x.shape[0], x.shape[2], x.shape[3], area_range, aspect_range, x.device)
    return paste(x, boxes), boxes


def resized_crop_flip(
    images: torch.Tensor,
    scale: Sequence[float] = (0.5, 1.0),
    aspect_range: Sequence[float] = (3 / 4, 4 / 3),
    flip_prob: float = 0.5,
) -> torch.Tensor:
    """Random resized crop (area ratio ~ U(scale), aspect ~ logU(aspect_range), sides capped at
    the image's) resized back to the full size, then a horizontal flip with ``flip_prob``; one
    affine_grid / grid_sample (bilinear) for the whole batch (M, C, H, W)."""
    M, dev, dt = images.shape[0], images.device, images.dtype
    u = torch.rand(M, 5, device=dev, dtype=dt)
    area = scale[0] + (scale[1] - scale[0]) * u[:, 0]
    lr0, lr1 = math.log(aspect_range[0]), math.log(aspect_range[1])
    aspect = torch.exp(lr0 + (lr1 - lr0) * u[:, 1])
    cw, ch = (area * aspect).sqrt().clamp(max=1.0), (area / aspect).sqrt().clamp(max=1.0)
    cx, cy = (2 * u[:, 2] - 1) * (1 - cw), (2 * u[:, 3] - 1) * (1 - ch)  # centre, in [-1, 1]
    sx = torch.where(u[:, 4] < flip_prob, -cw, cw)  # a negative x scale mirrors the crop
    zero = torch.zeros_like(cw)
    theta = torch.stack([sx, zero, cx, zero, ch, cy], dim=1).reshape(M, 2, 3)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, "bilinear", padding_mode="border", align_corners=False)


def check_range(name: str, value: Sequence[float], top: float) -> tuple[float, float]:
    """``value`` as a range (lo, hi) with 0 < lo <= hi <= top, else a ValueError."""
    if len(value) != 2 or not 0.0 < value[0] <= value[1] <= top:
        raise ValueError(f"{name} must be a range [lo, hi] with 0 < lo <= hi <= {top}: {value}")
    return float(value[0]), float(value[1])


@strategies.register("outliers")
class Outliers(NegativeStrategy):
    """Synthetic outliers in place of a fraction of the batch (FIRM [0, 1], CutPaste [2], OE [3]).

    Args:
        ratio: fraction of the batch replaced, in [0, 1); 0 is the identity. FIRM [1]: 0.75.
        kinds: outlier kinds drawn uniformly per slot, from ``rotate``, ``cutpaste``, ``oe``.
        angles: rotation angles in degrees, from 90, 180, 270.
        rotation_labels: ``separate`` (rotation_label(r) per angle, as the labels 1..3 of [1])
            or ``shared`` (OUTLIER_LABEL for every outlier).
        patch_area: CutPaste area ratio range [2].
        patch_aspect: CutPaste aspect ratio (w / h) range [2], sampled log-uniformly.
        oe_path: a folder of .png/.jpg/.jpeg images (searched recursively) or a .npy file of
            uint8 images (N, H, W, 3), e.g. the 300K random images of [3]; loaded by bind_data.
        oe_max_images: at most this many OE images are loaded (a subset seeded by ``seed``).
        oe_crop_scale: area ratio range of the random resized crop of OE views.
        oe_flip_prob: probability of a horizontal flip of an OE view.
        seed: seed of the OE subset.
    """

    capturable = True
    contract_kwargs = {"ratio": 0.5}
    zero_kwargs = {"ratio": 0.0}

    def __init__(
        self,
        *,
        ratio: Annotated[float, "must lie in [0, 1) (an image must stay inlier)"] = 0.75,
        kinds: Sequence[str] = ("rotate",),
        angles: Annotated[Sequence[int], "must be distinct values of [90, 180, 270]"] = (
            90,
            180,
            270,
        ),
        rotation_labels: RotationLabels = "separate",
        patch_area: Sequence[float] = (0.02, 0.15),
        patch_aspect: Sequence[float] = (0.3, 3.3),
        oe_path: str | None = None,
        oe_max_images: Annotated[int, "must be a positive int"] = 50000,
        oe_crop_scale: Sequence[float] = (0.5, 1.0),
        oe_flip_prob: Annotated[float, "must lie in [0, 1]"] = 0.5,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if not 0.0 <= ratio < 1.0:
            raise ValueError(f"ratio must lie in [0, 1) (an image must stay inlier), got {ratio}")
        kinds, angles = tuple(kinds), tuple(angles)
        if not kinds or len(set(kinds)) != len(kinds) or not set(kinds) <= set(KINDS):
            raise ValueError(f"kinds must be distinct names from {list(KINDS)}, got {list(kinds)}")
        if not angles or len(set(angles)) != len(angles) or not set(angles) <= {90, 180, 270}:
            raise ValueError(f"angles must be distinct values of [90, 180, 270], got {angles}")
        if rotation_labels not in get_args(RotationLabels):
            raise ValueError(f"rotation_labels must be 'separate' or 'shared': {rotation_labels!r}")
        if rotation_labels == "separate" and "rotate" in kinds and len(kinds) > 1:
            raise ValueError(
                "rotation_labels='separate' gives 90 deg rotations the label -2 = OUTLIER_LABEL, "
                f"which the other kinds {[k for k in kinds if k != 'rotate']} also use: set "
                "rotation_labels='shared' or use kinds=['rotate'] alone"
            )
        self.patch_area = check_range("patch_area", patch_area, 1.0)
        self.patch_aspect = check_range("patch_aspect", patch_aspect, math.inf)
        self.oe_crop_scale = check_range("oe_crop_scale", oe_crop_scale, 1.0)
        if not 0.0 <= oe_flip_prob <= 1.0:
            raise ValueError(f"oe_flip_prob must lie in [0, 1], got {oe_flip_prob}")
        if type(oe_max_images) is not int or oe_max_images < 1:  # bool is refused too
            raise ValueError(f"oe_max_images must be a positive int, got {oe_max_images!r}")
        if "oe" in kinds and not oe_path:
            raise ValueError(f"kind 'oe' needs oe_path (got {oe_path!r}): {OE_HELP}")
        if "oe" not in kinds and oe_path:
            raise ValueError(f"oe_path is set ({oe_path!r}) but 'oe' is not in kinds {list(kinds)}")
        self.ratio, self.kinds, self.rotation_labels = ratio, kinds, rotation_labels
        self.quarter_turns = tuple(a // 90 for a in angles)
        self.oe_path, self.oe_max_images = oe_path, oe_max_images
        self.oe_flip_prob, self.seed = oe_flip_prob, seed
        # Not in checkpoints (constants, and data reloaded by bind_data), but follow .to(device).
        self.register_buffer("turns", torch.tensor(self.quarter_turns), persistent=False)
        labels = [rotation_label(t) for t in self.quarter_turns]  # "separate": one per angle
        self.register_buffer("turn_labels", torch.tensor(labels), persistent=False)
        self.register_buffer("kind_ids", torch.arange(len(kinds)), persistent=False)
        self.register_buffer("oe_images", None, persistent=False)  # uint8 (M, C, S, S)
        self.register_buffer("mean", None, persistent=False)  # (C, 1, 1)
        self.register_buffer("std", None, persistent=False)  # (C, 1, 1)
        self._turn_index: dict[tuple, torch.Tensor] = {}  # turn_index per (H, W, device), lazily
        self._stats: dict[str, torch.Tensor | float] = {}

    def setup(self, ctx: SetupContext) -> None:
        self.bind_data(ctx.image_size, ctx.mean, ctx.std)

    def bind_data(self, image_size: int, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        """Store the normalisation; with kind ``oe`` load the OE images (once per image size and
        channel count), so that a bad ``oe_path`` fails at setup, not at the first step."""
        if image_size < 1 or not mean or len(mean) != len(std) or min(std) <= 0:
            raise ValueError(
                "bind_data needs image_size >= 1 and mean, std of equal length with std > 0, got "
                f"{image_size}, {mean}, {std}"
            )
        if "oe" in self.kinds and len(mean) not in (1, 3):
            raise ValueError(f"OE images are RGB or grayscale: mean/std need 3 or 1 values: {mean}")
        self.mean = torch.tensor(mean, dtype=torch.float64)[:, None, None]
        self.std = torch.tensor(std, dtype=torch.float64)[:, None, None]
        shape = (len(mean), image_size, image_size)
        if "oe" in self.kinds and (self.oe_images is None or self.oe_images.shape[1:] != shape):
            path = Path(str(self.oe_path)).expanduser()
            self.oe_images = load_oe_images(
                path, image_size, len(mean), self.oe_max_images, self.seed
            )

    def check_sizes(self, queue_size: int, batch_size: int) -> None:
        self.check_batch_size(batch_size)

    def check_batch_size(self, n: int) -> None:
        """ValueError if round(ratio * n) outliers leave no in-distribution image in n."""
        m = num_outliers(self.ratio, n)
        if m >= n > 0:
            raise ValueError(
                f"ratio {self.ratio} replaces {m} of the {n} images of a batch, leaving no "
                f"in-distribution image: use a ratio below {1 - 0.5 / n:.4g} or a larger batch "
                "(the batch per rank under DDP)"
            )

    @torch.no_grad()
    def transform_batch(self, batch: Batch, ctx: StepContext = ONE_PROCESS) -> Batch:
        """The batch with ``ratio`` of its images (both views) replaced by outliers and their
        labels by the outlier labels."""
        x1, x2, labels = batch.x1, batch.x2, batch.y
        N = x1.shape[0]
        m = num_outliers(self.ratio, N)
        if m == 0:
            self._stats = {"outlier_fraction": 0.0, **{f"outliers_{k}": 0.0 for k in self.kinds}}
            return batch
        self.check_inputs(x1, x2, labels)
        dev = x1.device
        self.follow(dev)  # the constant buffers (kind ids, turn labels) on the batch's device
        slots = torch.randperm(N, device=dev)[:m]  # (m,)
        kind = torch.randint(len(self.kinds), (m,), device=dev)  # (m,)
        a1, a2 = x1[slots], x2[slots]  # (m, C, H, W): the images the outliers are made from
        # Every kind is made for all m slots, then selected per slot: shapes (and the RNG stream)
        # never depend on the draws, so there is no host sync. ``kind`` is drawn with one kind
        # too (the same RNG stream); the first kind's outliers are the base the others overwrite.
        o1, o2, y = self.make(self.kinds[0], a1, a2, labels.dtype, ctx)
        for i, name in enumerate(self.kinds[1:], start=1):
            b1, b2, yb = self.make(name, a1, a2, labels.dtype, ctx)
            chosen = kind == i  # (m,)
            o1 = torch.where(chosen[:, None, None, None], b1, o1)
            o2 = torch.where(chosen[:, None, None, None], b2, o2)
            y = torch.where(chosen, yb, y)
        self._stats = {"outlier_fraction": m / N}
        if len(self.kinds) == 1:
            self._stats[f"outliers_{self.kinds[0]}"] = float(m)
        else:
            counts = (kind[:, None] == self.kind_ids).sum(0, dtype=torch.float32)
            self._stats.update({f"outliers_{k}": counts[i] for i, k in enumerate(self.kinds)})
        return batch.replace(
            x1=x1.index_copy(0, slots, o1),
            x2=x2.index_copy(0, slots, o2),
            y=labels.index_copy(0, slots, y),
        )

    def make(
        self,
        name: str,
        a1: torch.Tensor,
        a2: torch.Tensor,
        label_dtype: torch.dtype,
        ctx: StepContext,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Outliers of kind ``name`` for every slot: both views (m, C, H, W) and labels (m,)."""
        m, dev = a1.shape[0], a1.device
        if name == "rotate":
            self.follow(dev)
            pick = torch.randint(len(self.turns), (m,), device=dev)  # (m,) a turn per slot
            index = self.turn_table(a1.shape[2], a1.shape[3], dev)[pick]  # (m, H * W)
            if self.rotation_labels == "separate":
                y = self.turn_labels[pick].to(label_dtype)  # rotation_label(r)
            else:
                y = torch.full((m,), OUTLIER_LABEL, dtype=label_dtype, device=dev)
            return turn(a1, index), turn(a2, index), y
        shared = torch.full((m,), OUTLIER_LABEL, dtype=label_dtype, device=dev)
        if name == "cutpaste":  # each view gets its own patch
            b1 = cutpaste(a1, self.patch_area, self.patch_aspect)[0]
            return b1, cutpaste(a2, self.patch_area, self.patch_aspect)[0], shared
        return (*self.oe_views(m, a1, ctx), shared)

    def turn_table(self, height: int, width: int, device: torch.device) -> torch.Tensor:
        """:func:`turn_index` of the configured angles, built once per image size and device."""
        key = (height, width, device)
        if key not in self._turn_index:
            self._turn_index[key] = turn_index(height, width, self.quarter_turns, device)
        return self._turn_index[key]

    def oe_views(
        self, m: int, like: torch.Tensor, ctx: StepContext = ONE_PROCESS
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Two normalised views (m, C, S, S) of m random OE images, dtype/device of ``like``."""
        self.follow(like.device)
        rank, world = ctx.rank, ctx.world_size
        # (world, m) draws keep the ranks' RNGs in step while each rank takes its own images.
        index = torch.randint(len(self.oe_images), (world, m), device=like.device)[rank]  # (m,)
        images = self.oe_images[index].to(like.dtype) / 255.0  # (m, C, S, S) in [0, 1]
        mean, std = self.mean.to(like.dtype), self.std.to(like.dtype)  # (C, 1, 1)
        v1 = resized_crop_flip(images, self.oe_crop_scale, flip_prob=self.oe_flip_prob)
        v2 = resized_crop_flip(images, self.oe_crop_scale, flip_prob=self.oe_flip_prob)
        return (v1 - mean) / std, (v2 - mean) / std

    def follow(self, device: torch.device) -> None:
        """Move the buffers to the batch's device once (bind_data may run after .to(device))."""
        if any(b.device != device for b in self.buffers()):
            self.to(device)

    def check_inputs(self, x1: torch.Tensor, x2: torch.Tensor, labels: torch.Tensor) -> None:
        """Shape checks (Python ints only, no sync)."""
        if x1.dim() != 4 or x1.shape != x2.shape or labels.shape != x1.shape[:1]:
            raise ValueError(
                "expected x1, x2 (N, C, H, W) of equal shape and labels (N,), got "
                f"{tuple(x1.shape)}, {tuple(x2.shape)}, {tuple(labels.shape)}"
            )
        self.check_batch_size(x1.shape[0])
        C, H, W = x1.shape[1:]
        if "rotate" in self.kinds and H != W and set(self.quarter_turns) & {1, 3}:
            raise ValueError(
                f"rotations by 90/270 deg need square images, got {H}x{W}: crop the views to a "
                "square or use angles=[180]"
            )
        if "oe" in self.kinds and self.oe_images is None:
            raise ValueError("kind 'oe' needs bind_data(image_size, mean, std) at setup")
        if "oe" in self.kinds and (C, H, W) != tuple(self.oe_images.shape[1:]):
            raise ValueError(
                f"batch images {(C, H, W)} differ from the OE images "
                f"{tuple(self.oe_images.shape[1:])}: bind_data with the training size and mean"
            )

    def diagnostics(self) -> dict[str, torch.Tensor | float]:
        return dict(self._stats)
