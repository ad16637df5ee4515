"""The batches of the device-resident training split (``data.resident: device``, see
:mod:`pretrain.data.resident`): this rank's training batches made on the device from the uint8
images, and the eval transform's batches of a resident bank or held-out split."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torchvision.transforms.v2 import functional as TVF

from pretrain.data import augment
from pretrain.data import augment_params as ap
from pretrain.data import device_params as dp
from pretrain.data.loaders import ResumableSampler, sample_seed
from pretrain.data.views import ViewSpec

UNIFORM_STREAM = 4  # sample_seed stream of the per-epoch uniform table (the sampler's is 1)


class Skipped:
    """``data.skip_bad_images`` on a resident split: ``skips`` (N,) per image (:class:`Held`)
    and the run's shared ``counter``, to which each batch adds the skips the loader path would
    count reading it (the loader reads, and counts, every substitute at every read)."""

    def __init__(self, skips: torch.Tensor, counter: torch.Tensor) -> None:
        self.skips, self.counter = skips.cpu(), counter

    def per_row(self, order: torch.Tensor, batch: int | None = None) -> list[int] | None:
        """The skips of each row of ``order`` (rows of ``batch`` when it is flat), or None when
        the split holds no substitute (the common case: nothing to add per step)."""
        if not bool(self.skips.any()):
            return None
        if batch is not None:
            return [int(part.sum()) for part in self.skips[order].split(batch)]
        return self.skips[order].sum(1).tolist()

    def add(self, count: int) -> None:
        if count:
            self.counter[0] += count


class ResidentViews:
    """This rank's batches ``(x1, x2, y, index, params[, support])`` of the loader path
    (:class:`pretrain.data.views.CropViews` collated), made on the device from resident uint8
    ``images`` (N, 3, H, W) and ``labels`` (N,). Images at the output size leave the crop (and
    affine) to stage 2 as the loader does; others are cropped here (``augment.crop_resize_to``,
    after ``augment.affine_nearest`` when configured) and carry the whole-image box."""

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        spec: ViewSpec,
        seed: int,
        sampler: ResumableSampler,
        support_views: int = 0,
        skipped: Skipped | None = None,
    ) -> None:
        self.images, self.labels, self.spec, self.seed = images, labels, spec, seed
        self.sampler, self.support_views, self.skipped = sampler, support_views, skipped
        self.device = images.device
        self.height, self.width = images.shape[-2:]
        self.at_size = (self.height, self.width) == (spec.image_size, spec.image_size)
        self.views = 2 + support_views
        whole = [0.0, 0.0, float(spec.image_size), float(spec.image_size), *ap.IDENTITY_THETA]
        self.whole = torch.tensor(whole, device=self.device)  # once, not per step

    def __len__(self) -> int:
        return self.images.shape[0]

    def uniforms(self, epoch: int) -> torch.Tensor:
        """(views, N, UNIFORMS) float64 uniforms of ``epoch``, drawn on the device, view v's
        from a generator seeded with (seed, epoch, v): sample i's views read column i whatever
        its position, rank or resume point, and the two views do not depend on the number of
        support views (as on the loader path)."""
        g = torch.Generator(device=self.device)
        table = torch.empty(
            (self.views, len(self), dp.UNIFORMS), dtype=torch.float64, device=self.device
        )
        for v in range(self.views):
            g.manual_seed(sample_seed(self.seed, epoch, v, stream=UNIFORM_STREAM))
            table[v].uniform_(generator=g)
        return table

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        s = self.sampler
        mine = s.epoch_order()[s.start_step :, s.rank]
        order = mine.to(self.device)  # once per epoch
        table = self.uniforms(s.epoch)
        counts = self.skipped.per_row(mine) if self.skipped is not None else None
        for step in range(order.shape[0]):
            if counts is not None:  # the loader's count of skips as it reads the batch (CPU)
                self.skipped.add(counts[step])
            yield self.batch(order[step], table)

    def batch(self, idx: torch.Tensor, table: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The batch of sample indices ``idx`` (on the device) given the epoch's table."""
        n, k = idx.shape[0], self.views
        x = self.images.index_select(0, idx)
        u = table.index_select(1, idx).transpose(0, 1).flatten(0, 1)  # (n * k, UNIFORMS)
        rows = dp.view_rows(u, self.spec, height=self.height, width=self.width).view(n, k, -1)
        if self.at_size:
            views = [x] * k
        else:
            views = [self.crop(x, rows[:, v]) for v in range(k)]
            rows = torch.cat([rows[..., : ap.NUM_PARAMS], self.whole.expand(n, k, -1)], dim=2)
        out = (views[0], views[1], self.labels.index_select(0, idx), idx, rows)
        if self.support_views:
            out = (*out, torch.stack(views[2:], dim=1))
        return out

    def crop(self, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Stage 1 of one view, batched: affine (if configured), then RandomResizedCrop, uint8."""
        xf = x.to(torch.float32)
        if self.spec.affine_degrees > 0 or self.spec.affine_translate > 0:
            xf = augment.affine_nearest(xf, rows[:, ap.THETA : ap.THETA + 6])
        box = rows[:, ap.TOP : ap.WIDTH + 1]
        return augment.crop_resize_to(xf, box, self.spec.image_size).to(torch.uint8)


class EvalBatches:
    """The eval transform (``loaders.eval_transform``: resize the short side to ``resize``,
    centre-crop ``size``, normalise) of a resident split, batched on the device: yields
    ``(x, y)``, x normalised float on the device, y on the CPU. The centre crop is
    torchvision's (``center_crop``: zero padding where ``size`` exceeds the resized image, as the
    loader's ``CenterCrop`` does when ``data.eval_resize`` < ``data.image_size``). The resize is
    ``F.interpolate(antialias=True)`` on float rounded to whole levels: within one level of the
    loader's uint8 resize (skipped when the images already have that size)."""

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        *,
        batch: int,
        size: int,
        resize: int,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        skipped: Skipped | None = None,
    ) -> None:
        self.images, self.labels, self.batch = images, labels.cpu(), batch
        self.skipped = skipped
        self.size, self.resize = size, resize
        dev = images.device
        self.mean = torch.tensor(mean, device=dev).view(1, -1, 1, 1)
        self.std = torch.tensor(std, device=dev).view(1, -1, 1, 1)

    def __len__(self) -> int:
        return -(-self.images.shape[0] // self.batch)

    def resized(self, h: int, w: int) -> tuple[int, int]:
        """torchvision's Resize(int) output size: the short side to ``resize``."""
        if h <= w:
            return self.resize, int(self.resize * w / h)
        return int(self.resize * h / w), self.resize

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        counts = None
        if self.skipped is not None:
            counts = self.skipped.per_row(torch.arange(len(self.labels)), self.batch)
        for i in range(0, self.images.shape[0], self.batch):
            if counts is not None:
                self.skipped.add(counts[i // self.batch])
            x = self.images[i : i + self.batch].to(torch.float32)
            h, w = x.shape[-2:]
            rh, rw = self.resized(h, w)
            if (rh, rw) != (h, w):
                x = (
                    F.interpolate(
                        x, size=(rh, rw), mode="bilinear", align_corners=False, antialias=True
                    )
                    .round_()
                    .clamp_(0, 255)
                )
            x = TVF.center_crop(x, [self.size, self.size])  # zero-padded when larger
            yield (x / 255.0 - self.mean) / self.std, self.labels[i : i + self.batch]
