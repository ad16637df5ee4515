"""Corruptions against numpy/scipy re-derivations of Hendrycks & Dietterich's CIFAR-10-C code."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from PIL import Image
from scipy import ndimage, stats

from linear_eval.inputs.corruptions import PARAMS, Cifar10C, corrupt, gaussian_blur
from pretrain.data.datasets import DatasetNotFoundError
from tests.helpers.fakedata_eval import write_cifar_c

# hendrycks/robustness ImageNet-C/create_c/make_cifar_c.py, severities 1..5, typed from the source.
PUBLISHED = {
    "gaussian_noise": [0.04, 0.06, 0.08, 0.09, 0.10],
    "shot_noise": [500, 250, 100, 75, 50],
    "gaussian_blur": [0.4, 0.6, 0.7, 0.8, 1.0],
    "contrast": [0.75, 0.5, 0.4, 0.3, 0.15],
}
SEVERITIES = [1, 2, 3, 4, 5]


def smooth_images(n: int = 2, c: int = 3, h: int = 17, w: int = 23, seed: int = 0) -> torch.Tensor:
    """Float64 (N, C, H, W) in [0, 1] with structure at several scales (blur changes it)."""
    rng = np.random.default_rng(seed)
    x = rng.random((n, c, h, w))
    x = 0.5 * x + 0.5 * ndimage.uniform_filter(x, size=(1, 1, 5, 5), mode="nearest")
    return torch.from_numpy(x)


def test_parameters_are_the_published_ones():
    assert {k: list(v) for k, v in PARAMS.items()} == PUBLISHED


@pytest.mark.parametrize("severity", SEVERITIES)
def test_gaussian_noise_equals_the_formula_on_the_same_draws(severity):
    x = smooth_images()
    out = corrupt(x, "gaussian_noise", severity, torch.Generator().manual_seed(7))
    z = torch.randn(x.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    c = PUBLISHED["gaussian_noise"][severity - 1]
    ref = np.clip(x.numpy() + c * z.numpy(), 0.0, 1.0)  # make_cifar_c.gaussian_noise / 255
    np.testing.assert_allclose(out.numpy(), ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("severity", SEVERITIES)
def test_gaussian_noise_distribution(severity):
    x = torch.full((64, 3, 32, 32), 0.5)  # 5 std from the clip bounds even at c = 0.1
    noise = (corrupt(x, "gaussian_noise", severity, torch.Generator().manual_seed(1)) - x).double()
    c, n = PUBLISHED["gaussian_noise"][severity - 1], noise.numel()
    assert abs(noise.mean().item()) < 4 * c / n**0.5
    assert noise.std().item() == pytest.approx(c, rel=4 * (2 / n) ** 0.5)
    assert stats.kstest(noise.flatten().numpy()[:20000], "norm", args=(0, c)).pvalue > 1e-3


@pytest.mark.parametrize("severity", SEVERITIES)
def test_shot_noise_is_poisson_counts_over_c(severity):
    c = PUBLISHED["shot_noise"][severity - 1]
    x = torch.cat([torch.full((32, 3, 32, 32), 0.2), torch.full((32, 3, 32, 32), 0.5)])
    out = corrupt(x, "shot_noise", severity, torch.Generator().manual_seed(2)).double()
    counts = out * c
    np.testing.assert_allclose(counts.numpy(), np.round(counts.numpy()), atol=1e-3)  # on k / c
    for half, level in ((out[:32], 0.2), (out[32:], 0.5)):
        n = half.numel()
        var = level / c  # Var[Poisson(c·x) / c] = x / c; clipping at 1 is < 1e-5 likely here
        assert half.mean().item() == pytest.approx(level, abs=4 * (var / n) ** 0.5)
        assert half.var().item() == pytest.approx(var, rel=0.03)


def scipy_blur(x: np.ndarray, sigma: float) -> np.ndarray:
    """make_cifar_c.gaussian_blur: skimage gaussian(multichannel=True) = scipy on the two spatial
    axes only, mode 'nearest', truncate 4, per image."""
    return np.stack(
        [
            ndimage.gaussian_filter(im, sigma=(0, sigma, sigma), mode="nearest", truncate=4.0)
            for im in x
        ]
    )


@pytest.mark.parametrize("severity", SEVERITIES)
def test_gaussian_blur_equals_scipy(severity):
    x = smooth_images(seed=severity)
    out = corrupt(x, "gaussian_blur", severity)
    ref = np.clip(scipy_blur(x.numpy(), PUBLISHED["gaussian_blur"][severity - 1]), 0, 1)
    np.testing.assert_allclose(out.numpy(), ref, rtol=0, atol=1e-12)
    out32 = corrupt(x.float(), "gaussian_blur", severity)
    np.testing.assert_allclose(out32.numpy(), ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("sigma", [0.3, 2.5, 4.0])
def test_blur_kernel_wider_than_the_image(sigma):
    x = smooth_images(n=1, c=2, h=5, w=7, seed=3)  # radius up to 16 > side: edges repeat further
    np.testing.assert_allclose(
        gaussian_blur(x, sigma).numpy(), scipy_blur(x.numpy(), sigma), rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("severity", SEVERITIES)
def test_contrast_equals_the_formula(severity):
    x = smooth_images(seed=10 + severity).numpy()
    c = PUBLISHED["contrast"][severity - 1]
    means = x.mean(axis=(2, 3), keepdims=True)  # per image and channel, as np.mean(axis=(0, 1))
    ref = np.clip((x - means) * c + means, 0, 1)
    out = corrupt(torch.from_numpy(x), "contrast", severity)
    np.testing.assert_allclose(out.numpy(), ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", sorted(PUBLISHED))
def test_distance_grows_with_severity(kind):
    x = smooth_images(n=4, h=32, w=32, seed=5).float()
    dist = [
        (corrupt(x, kind, s, torch.Generator().manual_seed(0)) - x).abs().mean().item()
        for s in SEVERITIES
    ]
    assert all(a < b for a, b in zip(dist, dist[1:])), dist
    assert dist[0] > 0


@pytest.mark.parametrize("kind", sorted(PUBLISHED))
def test_output_range_shape_dtype_and_reproducibility(kind):
    x = torch.rand(3, 3, 8, 8, generator=torch.Generator().manual_seed(4))
    x[0, 0, 0, :2] = torch.tensor([0.0, 1.0])  # the bounds themselves are valid input
    a = corrupt(x, kind, 5, torch.Generator().manual_seed(9))
    b = corrupt(x, kind, 5, torch.Generator().manual_seed(9))
    assert a.shape == x.shape and a.dtype == x.dtype
    assert a.min() >= 0 and a.max() <= 1
    assert torch.equal(a, b)
    if "noise" in kind:
        assert not torch.equal(a, corrupt(x, kind, 5, torch.Generator().manual_seed(10)))


def test_noise_draws_the_same_for_each_image_no_matter_the_batch_split():
    """One draw over the whole batch: the same generator state gives the same noise tensor."""
    x = torch.full((6, 3, 4, 4), 0.5)
    whole = corrupt(x, "gaussian_noise", 3, torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    parts = torch.cat(
        [corrupt(x[:2], "gaussian_noise", 3, g), corrupt(x[2:], "gaussian_noise", 3, g)]
    )
    assert torch.equal(whole, parts)


def test_bad_inputs():
    x = torch.rand(2, 3, 4, 4)
    with pytest.raises(ValueError, match="unknown corruption 'fog'"):
        corrupt(x, "fog", 1)
    for severity in (0, 6, 2.0):
        with pytest.raises(ValueError, match="severity must be an integer 1..5"):
            corrupt(x, "contrast", severity)
    with pytest.raises(ValueError, match=r"float \(N, C, H, W\)"):
        corrupt(x[0], "contrast", 1)
    with pytest.raises(ValueError, match=r"float \(N, C, H, W\)"):
        corrupt((x * 255).to(torch.uint8), "contrast", 1)
    with pytest.raises(ValueError, match="before Normalize"):
        corrupt(x - 0.5, "contrast", 1)


@pytest.mark.parametrize("severity", SEVERITIES)
def test_cifar10c_reads_the_severity_block(tmp_path, severity):
    images, labels = write_cifar_c(tmp_path, "gaussian_blur", per_severity=4, seed=severity)
    ds = Cifar10C(str(tmp_path), "gaussian_blur", severity)
    assert len(ds) == 4
    rows = range((severity - 1) * 4, severity * 4)
    for i, row in enumerate(rows):
        image, label = ds[i]
        assert isinstance(image, Image.Image) and image.size == (32, 32)
        np.testing.assert_array_equal(np.asarray(image), images[row])
        assert label == int(labels[row]) and isinstance(label, int)


def test_cifar100c_folder(tmp_path):
    images, _ = write_cifar_c(tmp_path, "contrast", per_severity=2, folder="CIFAR-100-C")
    ds = Cifar10C(str(tmp_path), "contrast", 2, folder="CIFAR-100-C")
    np.testing.assert_array_equal(np.asarray(ds[1][0]), images[3])


def test_cifar10c_missing_names_the_path(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=re.escape(str(tmp_path / "CIFAR-10-C"))):
        Cifar10C(str(tmp_path), "gaussian_noise", 1)
    write_cifar_c(tmp_path, "gaussian_noise")
    with pytest.raises(DatasetNotFoundError, match=re.escape("shot_noise.npy")):
        Cifar10C(str(tmp_path), "shot_noise", 1)


def test_cifar10c_bad_arguments_and_shapes(tmp_path):
    with pytest.raises(ValueError, match="unknown CIFAR-C corruption 'blur'"):
        Cifar10C(str(tmp_path), "blur", 1)
    with pytest.raises(ValueError, match="severity"):
        Cifar10C(str(tmp_path), "fog", 6)
    write_cifar_c(tmp_path, "fog", per_severity=2)
    np.save(tmp_path / "CIFAR-10-C" / "labels.npy", np.zeros(9, np.uint8))
    with pytest.raises(ValueError, match="expected"):
        Cifar10C(str(tmp_path), "fog", 1)
