"""The resident path's evaluation images (kNN monitor and online probe) are the loader path's
(``resident_views.EvalBatches`` against ``loaders.eval_transform`` across
size combinations, ``data.eval_resize`` below ``data.image_size`` (torchvision's CenterCrop pads)
included, and a held-out split whose images differ in size is evaluated as the loader does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pretrain import build, config
from pretrain.data import loaders, resident_views, views
from pretrain.testing.fakedata import random_images, write_png

MEAN, STD = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
TOL = 1.0 / 255 / min(STD) + 1e-5  # one level of the uint8 resize


@pytest.mark.parametrize(
    "height,width,size,resize",
    [
        (16, 16, 16, 8),  # digits with data.eval_resize=8: the loader pads 8 -> 16
        (16, 16, 16, 12),  # odd padding (2 each side)
        (16, 16, 14, 11),  # pad by 3: one more on the right and the bottom
        (20, 14, 16, 10),  # non-square: pads the short side only, crops the long one
        (14, 20, 16, 10),  # landscape: the height is the short side
        (12, 20, 12, 16),  # landscape upsampled to a short side of 16, then a crop
        (16, 16, 12, 16),  # no resize, a crop
        (16, 16, 16, 24),  # upsample then crop
    ],
)
def test_eval_batches_equal_the_eval_transform_for_every_size(height, width, size, resize):
    imgs = torch.from_numpy(random_images(6, max(height, width), seed=4)).permute(0, 3, 1, 2)
    imgs = imgs[:, :, :height, :width].contiguous()
    tf = loaders.eval_transform(size=size, resize=resize, mean=MEAN, std=STD)
    ev = resident_views.EvalBatches(imgs, torch.arange(6), batch=4, size=size, resize=resize,
                              mean=MEAN, std=STD)  # fmt: skip
    got = torch.cat([x for x, _ in ev])
    want = torch.stack([tf(views.TF.to_image(i)) for i in imgs])
    assert got.shape == want.shape == (6, 3, size, size)
    assert (got - want).abs().max() <= TOL


@pytest.mark.parametrize("resize", [8, 12, 16, 20])
def test_digits_monitor_batches_equal_the_loaders_for_any_eval_resize(tmp_path, resize):
    """digits (16 px) resident and on the loader, ``data.eval_resize`` below, at and above the
    image size: the same bank and held-out images (the mutation 'slice with a negative offset'
    gave 4x4 batches at resize 8)."""
    over = [f"out_dir={tmp_path}", f"data.eval_resize={resize}"]
    held = build.datasets_for(config.load("digits_moco.yaml", ["data.resident=device", *over]))
    ref = build.datasets_for(config.load("digits_moco.yaml", over))
    assert held.pipeline == "resident" and ref.pipeline == "loader"
    std = min(config.load("digits_moco.yaml").data.std)
    for a, b in ((held.test_loader, ref.test_loader), (held.bank_loader, ref.bank_loader)):
        xa, ya = zip(*a)
        xb, yb = zip(*b)
        xa, xb = torch.cat(xa), torch.cat(xb)
        assert xa.shape == xb.shape == (len(xb), 3, 16, 16)
        assert (xa - xb).abs().max() <= 1.0 / 255 / std + 1e-5
        assert torch.equal(torch.cat(ya), torch.cat(yb))


def _folder(root: Path, split: str, sizes: list[int], seed: int) -> None:
    for i, s in enumerate(sizes):
        write_png(root / split / f"c{i % 2}" / f"{i:03d}.png", random_images(1, s, seed + i)[0])


def test_resident_held_out_images_of_another_size_are_evaluated_as_the_loader_does(tmp_path):
    """data.resident=device with held-out images of several sizes (training images all one
    size): not refused as 'the training images differ in size'; the held-out split goes through
    the loader's eval transform, the training split stays resident."""
    root = tmp_path / "d"
    _folder(root, "train", [16] * 8, seed=0)
    _folder(root, "test", [16, 20, 12, 24], seed=50)
    over = ["data.name=imagefolder", f"data.root={root}", "data.image_size=16",
            "data.eval_resize=16", f"out_dir={tmp_path / 'run'}", "train.batch_size=4"]  # fmt: skip
    held = build.datasets_for(config.load("digits_moco.yaml", ["data.resident=device", *over]))
    ref = build.datasets_for(config.load("digits_moco.yaml", ["data.resident=off", *over]))
    assert held.pipeline == "resident"
    assert isinstance(held.train_loader, resident_views.ResidentViews)
    for a, b in ((held.test_loader, ref.test_loader), (held.bank_loader, ref.bank_loader)):
        xa, ya = zip(*a)
        xb, yb = zip(*b)
        torch.testing.assert_close(torch.cat(xa), torch.cat(xb), atol=TOL, rtol=0)
        assert torch.equal(torch.cat(ya), torch.cat(yb))
