"""Replayable augmentation (TwoViews) and the resumable, rank-sharded sampler."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset
from torchvision import tv_tensors

from pretrain.data.augment_params import ViewSpec
from pretrain.data.loaders import (
    ResumableSampler,
    Transformed,
    TwoViews,
    eval_transform,
    train_transform,
)

MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)


class TinyImages(Dataset):
    def __init__(self, n: int = 6) -> None:
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (n, 3, 16, 16), generator=g, dtype=torch.uint8)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        return tv_tensors.Image(self.images[i]), i % 3


def every_augmentation_on():
    spec = ViewSpec(image_size=16, crop_scale=(0.2, 1.0), jitter_strength=0.4, jitter_prob=0.8,
                    grayscale_prob=0.2, blur_prob=0.5, hflip_prob=0.5, affine_degrees=15.0,
                    affine_translate=0.1)  # fmt: skip
    return train_transform(spec=spec, mean=MEAN, std=STD)


def two_views(seed: int = 0) -> TwoViews:
    return TwoViews(TinyImages(), every_augmentation_on(), seed)


def test_same_epoch_and_index_give_the_same_views_whatever_the_global_rng():
    torch.manual_seed(1)
    a1, a2, label_a, idx_a = two_views()[(3, 4)]
    torch.manual_seed(999)
    torch.rand(17)
    b1, b2, label_b, idx_b = two_views()[(3, 4)]  # a second dataset instance
    assert torch.equal(a1, b1) and torch.equal(a2, b2)
    assert (label_a, idx_a) == (label_b, idx_b) == (1, 4)
    assert a1.shape == (3, 16, 16) and a1.dtype == torch.float32


def test_views_differ_between_epochs_indices_seeds_and_within_a_pair():
    ds = two_views()
    x1, x2, _, _ = ds[(3, 4)]
    assert not torch.equal(x1, x2)
    assert not torch.equal(x1, ds[(4, 4)][0])
    assert not torch.equal(x1, two_views(seed=1)[(3, 4)][0])
    # Same image content at another index still gets another augmentation.
    ds.base.images[5] = ds.base.images[4]
    assert not torch.equal(x1, ds[(3, 5)][0])


def test_two_views_leaves_the_global_rng_untouched():
    torch.manual_seed(5)
    state = torch.get_rng_state()
    expected = torch.rand(4)  # what the global stream gives next without the dataset
    torch.set_rng_state(state)
    ds = two_views()
    ds[(0, 1)]
    ds[(2, 3)]
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(torch.rand(4), expected)


def test_eval_transform_is_resize_crop_normalise_by_hand():
    image = tv_tensors.Image(torch.arange(3 * 4 * 6, dtype=torch.uint8).view(3, 4, 6))
    # the short side is 4 already: a centre 4x4 crop
    out = eval_transform(size=4, resize=4, mean=MEAN, std=STD)(image)
    crop = image.numpy()[:, :, 1:5].astype(np.float64) / 255.0
    ref = (crop - 0.5) / 0.25
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6, atol=1e-6)
    ds = Transformed(TinyImages(2), eval_transform(size=16, resize=16, mean=MEAN, std=STD))
    x, label = ds[1]
    np.testing.assert_allclose(
        x.numpy(), (ds.base.images[1].numpy() / 255.0 - 0.5) / 0.25, rtol=1e-6, atol=1e-6
    )
    assert label == 1


# ------------------------------------------------------------------------------------------------
# ResumableSampler

SIZE, BATCH = 37, 8  # 4 full batches, 5 images dropped


def epoch_indices(sampler: ResumableSampler, epoch: int, start_step: int = 0) -> list[int]:
    sampler.set_epoch(epoch, start_step)
    pairs = list(sampler)
    assert len(pairs) == len(sampler)
    assert {e for e, _ in pairs} <= {epoch}
    return [i for _, i in pairs]


def test_full_epoch_is_a_drop_last_permutation():
    order = epoch_indices(ResumableSampler(SIZE, BATCH, seed=0), epoch=0)
    assert len(order) == (SIZE // BATCH) * BATCH == 32
    assert len(set(order)) == 32
    assert set(order) <= set(range(SIZE))
    assert order != sorted(order)


@pytest.mark.parametrize("start_step", [0, 1, 3, 4])
def test_start_step_yields_the_tail_of_the_epoch(start_step):
    full = epoch_indices(ResumableSampler(SIZE, BATCH, seed=3), epoch=2)
    resumed = epoch_indices(ResumableSampler(SIZE, BATCH, seed=3), epoch=2, start_step=start_step)
    assert resumed == full[start_step * BATCH :]


def test_two_ranks_split_each_global_batch_into_consecutive_halves():
    full = epoch_indices(ResumableSampler(SIZE, BATCH, seed=0), epoch=1)
    ranks = [
        epoch_indices(ResumableSampler(SIZE, BATCH, seed=0, rank=r, world_size=2), epoch=1)
        for r in range(2)
    ]
    half = BATCH // 2
    for step in range(SIZE // BATCH):
        batch = full[step * BATCH : (step + 1) * BATCH]
        assert ranks[0][step * half : (step + 1) * half] == batch[:half]
        assert ranks[1][step * half : (step + 1) * half] == batch[half:]
    resumed = [
        epoch_indices(ResumableSampler(SIZE, BATCH, seed=0, rank=r, world_size=2), 1, 2)
        for r in range(2)
    ]
    assert resumed[0] == ranks[0][2 * half :] and resumed[1] == ranks[1][2 * half :]


def test_epochs_and_seeds_give_different_orders_and_repeat_exactly():
    sampler = ResumableSampler(SIZE, BATCH, seed=0)
    e0, e1 = epoch_indices(sampler, 0), epoch_indices(sampler, 1)
    assert e0 != e1
    assert epoch_indices(sampler, 0) == e0
    assert epoch_indices(ResumableSampler(SIZE, BATCH, seed=1), 0) != e0


def test_sampler_refuses_impossible_shapes():
    with pytest.raises(ValueError, match=r"dataset of 7 images is smaller than one batch \(8\)"):
        ResumableSampler(7, 8, seed=0)
    with pytest.raises(ValueError, match="global batch 9 is not divisible by 2 ranks"):
        ResumableSampler(40, 9, seed=0, world_size=2)


def test_the_transforms_take_their_sizes_and_statistics_by_keyword_only():
    """Two tuples of one length (mean, std) and two sizes (crop, resize) cannot be swapped by
    position: a positional call is refused."""
    spec = ViewSpec(image_size=8, crop_scale=(0.2, 1.0))
    with pytest.raises(TypeError):
        train_transform(spec, MEAN, STD)  # type: ignore[misc]
    with pytest.raises(TypeError):
        eval_transform(16, 18, MEAN, STD)  # type: ignore[misc]
    image = tv_tensors.Image(torch.arange(3 * 18 * 20, dtype=torch.uint8).view(3, 18, 20))
    out = eval_transform(size=16, resize=18, mean=MEAN, std=STD)(image)
    assert out.shape == (3, 16, 16)
