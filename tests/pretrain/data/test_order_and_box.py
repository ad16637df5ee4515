"""Tests that catch one-line mutations: the class order of an image
folder is torchvision ImageFolder's (case-sensitive: ``B`` before ``a``), in the training split
and in a held-out split labelled by it; the resident path's stage-2 box of an image cropped on
the device is the whole image, so stage 2 with every op off returns the device crop unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torchvision.datasets import ImageFolder

from pretrain import build, config
from pretrain.data import augment, loaders, resident_views, views
from pretrain.data import augment_params as ap
from pretrain.testing.fakedata import random_images, write_png

CLASSES = {"a": ["b.png", "A.png"], "B": ["x.png"], "c": ["Z.png", "a.png"], "_d": ["q.png"]}


def write(root: Path, split: str, seed: int) -> None:
    files = [(c, f) for c, names in CLASSES.items() for f in names]
    for (c, f), img in zip(files, random_images(len(files), 8, seed), strict=True):
        write_png(root / split / c / f, img)


def test_class_and_file_order_is_imagefolders_for_train_and_test(tmp_path):
    write(tmp_path, "train", seed=0)
    write(tmp_path, "test", seed=1)
    cfg = config.load("digits_moco.yaml", [
        "data.name=imagefolder", f"data.root={tmp_path}", "data.image_size=8",
        "data.eval_resize=8", "train.batch_size=4", "moco.queue_size=4", "data.resident=off",
        f"out_dir={tmp_path / 'run'}"])  # fmt: skip
    data = build.datasets_for(cfg)
    for split, loader in (("train", data.bank_loader), ("test", data.test_loader)):
        ours = loader.dataset.base
        ref = ImageFolder(str(tmp_path / split))
        assert ref.classes == ["B", "_d", "a", "c"]  # case-sensitive, as sorted()
        assert ours.classes == ref.classes, split
        assert [(str(p), y) for p, y in ours.samples] == ref.samples, split


def test_resident_stage_2_box_is_the_whole_device_crop():
    """Images of 20 px trained at 16: the resident batch crops on the device and hands stage 2
    the box (0, 0, 16, 16) and the identity affine; with every photometric op off, stage 2 is the
    normalisation of that crop, exactly (a box one pixel short would resample it)."""
    size, n = 16, 32
    spec = views.ViewSpec(image_size=size, crop_scale=(0.2, 1.0), affine_degrees=10.0,
                          affine_translate=0.1, jitter_strength=0.4, jitter_prob=0.8,
                          grayscale_prob=0.2, blur_prob=0.5, hflip_prob=0.5)  # fmt: skip
    images = torch.from_numpy(random_images(n, 20, seed=3)).permute(0, 3, 1, 2).contiguous()
    sampler = loaders.ResumableSampler(n, 8, seed=0)
    held = resident_views.ResidentViews(images, torch.zeros(n, dtype=torch.int64), spec, 0, sampler)
    assert not held.at_size
    x1, x2, _, _, rows = held.batch(torch.arange(8), held.uniforms(0))
    box = rows[..., ap.NUM_PARAMS : ap.NUM_PARAMS + 4]
    assert torch.equal(box, torch.tensor([0.0, 0.0, size, size]).expand_as(box))
    theta = rows[..., ap.THETA : ap.THETA + 6]
    assert torch.equal(theta, torch.tensor(ap.IDENTITY_THETA).expand_as(theta))
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    off = augment.Photometric(jitter=False, grayscale=False, blur=False, hflip=False,
                              affine=True, blur_kernel=3, mean=mean, std=std)  # fmt: skip
    for x, r in ((x1, rows[:, 0]), (x2, rows[:, 1])):
        want = (x.float() / 255 - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(
            1, 3, 1, 1
        )
        torch.testing.assert_close(off(x, r), want, rtol=0, atol=1e-6)
    assert not np.array_equal(x1.numpy(), x2.numpy())  # two crops, each passed through as it is
