"""The two-stage pipeline against torchvision: each batched op equals
``torchvision.transforms.v2.functional`` given the same parameters, and every sampled parameter
follows the distribution of the torchvision transform it replaces."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from pretrain.data import augment, jitter, views
from pretrain.data import augment_params as ap

N = 100_000
ALPHA = 1e-3  # fixed seeds: each test is deterministic; this only sets how far off is "off"
TOL = 1 / 255


def images(n: int = 6, h: int = 20, w: int = 24, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, h, w, generator=g)
    x[0] = x[0, :1]  # a gray image (max == min in HSV)
    x[1, :, :4] = 1.0  # saturated pixels
    return x


def factors(n: int, lo: float, hi: float, seed: int = 1) -> torch.Tensor:
    return torch.empty(n).uniform_(lo, hi, generator=torch.Generator().manual_seed(seed))


def photo(**kw: float) -> ap.ViewSpec:
    """A view spec with these photometric settings (the crop settings do not enter the rows)."""
    return ap.ViewSpec(image_size=1, crop_scale=(1.0, 1.0), **kw)


def per_sample(ref, x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    return torch.stack([ref(x[i], float(f[i])) for i in range(len(x))])


def pixels(x: torch.Tensor) -> torch.Tensor:
    """(N, 3, H, W) -> the channels-last pixel rows (N, H W, 3) the colour ops take."""
    return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1, 3)


def images_of(pix: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return pix.view(like.shape[0], like.shape[2], like.shape[3], 3).permute(0, 3, 1, 2)


def blend_op(op: int):
    """Brightness (0), contrast (1) or saturation (2) on every image: one batched
    ``jitter.blend`` stage with the matrices ColorJitter's stages take (I + g E, g B)."""

    def run(x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        e, b = jitter.basis(op)
        g = (f.double() - 1.0).view(-1, 1, 1)
        mt, bt = (torch.eye(3, dtype=torch.float64) + g * e).float(), (g * b).float()
        return images_of(jitter.blend(pixels(x), mt, bt), x)

    return run


def hue(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    return images_of(jitter.adjust_hue(pixels(x), shift, *jitter.hue_constants()), x)


@pytest.mark.parametrize(
    "ours, ref, lo, hi",
    [
        (blend_op(0), TF.adjust_brightness, 0.0, 2.2),
        (blend_op(1), TF.adjust_contrast, 0.0, 2.2),
        (blend_op(2), TF.adjust_saturation, 0.0, 2.2),
        (hue, TF.adjust_hue, -0.5, 0.5),
    ],
)
def test_jitter_ops_equal_torchvision(ours, ref, lo, hi):
    x, f = images(), factors(6, lo, hi)
    expected = per_sample(ref, x, f)
    assert (ours(x, f) - expected).abs().max() <= TOL
    # uint8 input, as the reference path feeds torchvision, which truncates its output (< 1/255)
    # and, for contrast and saturation, floors the gray image (< |1 - factor| / 255 <= 1.2/255)
    x8 = (x * 255).round().to(torch.uint8)
    expected8 = per_sample(ref, x8, f).float() / 255
    assert (ours(x8.float() / 255, f) - expected8).abs().max() <= 2.2 * TOL + 1e-6


def test_grayscale_and_flip_equal_torchvision():
    """The luma map equals ``rgb_to_grayscale`` up to float32 rounding (a matrix product sums
    in its own order); the flip, folded into the crop's weights or not, is exact."""
    x = images(h=20, w=20)
    gray = images_of(pixels(x) @ jitter.luma().float(), x)
    assert (gray - TF.rgb_to_grayscale(x, num_output_channels=3)).abs().max() <= 1e-6
    params = torch.zeros(6, ap.NUM_PARAMS)
    params[::2, ap.FLIP] = 1.0
    params[:3, ap.GRAY] = 1.0
    stage2 = augment.Photometric(jitter=False, grayscale=True, blur=False, hflip=True,
                                 blur_kernel=3, mean=(0.0,) * 3, std=(1.0,) * 3)  # fmt: skip
    x8 = (x * 255).round().to(torch.uint8)
    whole = torch.tensor([0.0, 0.0, 20.0, 20.0]).expand(6, 4)  # the identity box
    for rows in (params, torch.cat([params, whole], dim=1)):
        out = stage2(x8, rows)
        for i in range(6):
            ref = TF.to_dtype(x8[i], torch.float32, scale=True)
            if i < 3:
                ref = TF.rgb_to_grayscale(ref, num_output_channels=3)
            if i % 2 == 0:
                ref = TF.horizontal_flip(ref)
            assert (out[i] - ref).abs().max() <= 1e-6 if i < 3 else torch.equal(out[i], ref)


@pytest.mark.parametrize("kernel", [3, 5, 23])
def test_gaussian_blur_equals_torchvision(kernel):
    x = images(h=32, w=28)
    sigma = factors(6, 0.1, 2.0)
    expected = torch.stack([TF.gaussian_blur(x[i], [kernel, kernel], [float(sigma[i])] * 2)
                            for i in range(6)])  # fmt: skip
    assert (augment.gaussian_blur(x, sigma, kernel) - expected).abs().max() <= TOL


def test_solarize_equals_torchvision():
    x = images()
    assert torch.equal(augment.solarize(x), TF.solarize(x, 0.5))


@pytest.mark.parametrize("size", [16, 24, 40])  # up- and down-scaling, and the whole image
def test_stage1_crop_equals_torchvision_resized_crop(size):
    """crop_view draws a box with crop_boxes and resizes exactly as v2.RandomResizedCrop."""
    g = torch.Generator().manual_seed(0)
    img = torch.randint(0, 256, (3, 40, 56), dtype=torch.uint8, generator=g)
    spec = views.ViewSpec(
        image_size=size,
        crop_scale=(0.2, 1.0),
        affine_degrees=0.0,
        affine_translate=0.0,
        jitter_strength=0.4,
        jitter_prob=0.8,
        grayscale_prob=0.2,
        blur_prob=0.5,
        hflip_prob=0.5,
    )
    for seed in range(20):
        out = views.crop_view(img, spec, np.random.default_rng(seed))
        top, left, h, w = (int(v) for v in ap.crop_boxes(
            np.random.default_rng(seed), 1, height=40, width=56, scale=(0.2, 1.0))[0])  # fmt: skip
        expected = TF.resized_crop(img, top, left, h, w, [size, size], antialias=True)
        assert out.dtype == torch.uint8 and torch.equal(out, expected)


def reference_view(crop: torch.Tensor, p: torch.Tensor, kernel: int) -> torch.Tensor:
    """What the reference path does after the crop, one image, torchvision functionals, floats."""
    x = TF.to_dtype(crop, torch.float32, scale=True)
    if p[ap.JITTER] > 0.5:
        ops = [
            lambda t: TF.adjust_brightness(t, float(p[ap.BRIGHTNESS])),
            lambda t: TF.adjust_contrast(t, float(p[ap.CONTRAST])),
            lambda t: TF.adjust_saturation(t, float(p[ap.SATURATION])),
            lambda t: TF.adjust_hue(t, float(p[ap.HUE])),
        ]
        for op in ap.ORDERS[int(p[ap.ORDER])]:
            x = ops[op](x)
    if p[ap.GRAY] > 0.5:
        x = TF.rgb_to_grayscale(x, num_output_channels=3)
    if p[ap.BLUR] > 0.5:
        x = TF.gaussian_blur(x, [kernel, kernel], [float(p[ap.SIGMA])] * 2)
    if p[ap.FLIP] > 0.5:
        x = TF.horizontal_flip(x)
    if p[ap.SOLARIZE] > 0.5:
        x = TF.solarize(x, 0.5)
    return x


def test_photometric_stage_equals_the_torchvision_chain():
    """All ops with drawn per-image parameters (every op order among 64 images) against the
    torchvision functionals applied one image at a time in the reference path's order."""
    n, size = 64, 20
    rows = torch.from_numpy(ap.photometric(np.random.default_rng(3), n, photo(
        jitter_strength=0.4, jitter_prob=0.8, grayscale_prob=0.2, blur_prob=0.5, hflip_prob=0.5,
        solarize_prob=0.2)))  # fmt: skip
    g = torch.Generator().manual_seed(1)
    crops = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
    kernel = ap.blur_kernel_size(size)
    mean, std = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)
    stage2 = augment.Photometric(jitter=True, grayscale=True, blur=True, hflip=True,
                                 solarize=True, blur_kernel=kernel, mean=mean, std=std)  # fmt: skip
    out = stage2(crops, rows)  # 64 images: 4 CPU chunks
    assert torch.equal(out[:16], stage2(crops[:16], rows[:16]))
    ref = torch.stack([reference_view(crops[i], rows[i], kernel) for i in range(n)])
    ref = TF.normalize(ref, list(mean), list(std))
    assert (out - ref).abs().max() <= TOL / min(std)


def all_ops_rows(n: int, size: int, seed: int = 0) -> torch.Tensor:
    """(n, NUM_COLUMNS) rows with every photometric op drawn, a crop box and an affine theta."""
    rng = np.random.default_rng(seed)
    photo_rows = ap.photometric(rng, n, photo(jitter_strength=0.4, jitter_prob=0.8,
                                grayscale_prob=0.2, blur_prob=0.5, hflip_prob=0.5,
                                solarize_prob=0.2))  # fmt: skip
    boxes = ap.crop_boxes(rng, n, height=size, width=size, scale=(0.2, 1.0))
    thetas = [ap.inverse_affine_matrix(*ap.affine_params(rng, degrees=15.0, translate=0.1,
                                                         height=size, width=size))
              for _ in range(n)]  # fmt: skip
    return torch.from_numpy(np.concatenate([photo_rows, boxes, thetas], axis=1).astype(np.float32))


def test_photometric_runs_without_host_syncs():
    """Stage 2 with every op on (affine, deferred crop, jitter in all orders, grayscale, blur,
    flip, solarize) has no would-be host sync, host-to-device copies of host data included
    (``negmine_core/contract/sync_counter.py``: a tensor built from a Python list on the device,
    a list index)."""
    from negmine_core.contract.sync_counter import SyncCounter

    n, size = 32, 12
    rows = all_ops_rows(n, size)
    assert rows[:, ap.JITTER].any() and rows[:, ap.SOLARIZE].any() and rows[:, ap.BLUR].any()
    stage2 = augment.Photometric(jitter=True, grayscale=True, blur=True, hflip=True,
                                 solarize=True, affine=True, blur_kernel=3, mean=(0.5,) * 3,
                                 std=(0.5,) * 3)  # fmt: skip
    x = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8)
    for run in (stage2, stage2.batch):  # the module (CPU chunking) and one pass (the device's)
        with SyncCounter() as syncs:
            out = run(x, rows)
        assert syncs.count == 0, syncs.report()
        assert out.shape == (n, 3, size, size) and torch.isfinite(out).all()
    with SyncCounter() as syncs:  # the counter sees the pattern this stage avoids
        torch.tensor([0.5 * size, 0.5 * size], device=x.device)
        rows[:, [ap.BRIGHTNESS, ap.CONTRAST]]
    assert syncs.kinds() == {"host_data": 2}, syncs.report()


def test_affine_grid_divisors_built_on_the_device_equal_the_host_list():
    """The affine grid's divisors, built with tensor ops, give the grid of torchvision's
    ``_affine_grid`` (divisor ``torch.tensor([0.5 * w, 0.5 * h])``) bit for bit, at w != h."""
    size, n = 16, 8
    rows = all_ops_rows(n, size, seed=4)
    x = torch.rand(n, 3, size, 20)
    theta = rows[:, ap.THETA :]
    h, w = x.shape[-2:]
    scale = torch.tensor([0.5 * w, 0.5 * h], dtype=torch.float32)
    rescaled = theta.view(n, 2, 3).transpose(1, 2).div(scale)
    ys, xs = torch.meshgrid(torch.linspace((1.0 - h) * 0.5, (h - 1.0) * 0.5, h),
                            torch.linspace((1.0 - w) * 0.5, (w - 1.0) * 0.5, w),
                            indexing="ij")  # fmt: skip
    base = torch.stack([xs, ys, torch.ones_like(xs)], -1).view(1, h * w, 3).expand(n, -1, -1)
    grid = base.bmm(rescaled).view(n, h, w, 2)
    want = torch.nn.functional.grid_sample(x, grid, mode="nearest", align_corners=False)
    assert torch.equal(augment.affine_nearest(x, theta), want)


# ---- distributions ------------------------------------------------------------------------


def draw(**kw: float) -> np.ndarray:
    base = dict(jitter_strength=0.4, jitter_prob=0.8, grayscale_prob=0.2, blur_prob=0.5,
                hflip_prob=0.5, solarize_prob=0.1)  # fmt: skip
    return ap.photometric(np.random.default_rng(7), N, photo(**{**base, **kw}))


@pytest.mark.parametrize("s", [0.4, 1.2])  # 1.2: the lower end clips at 0
def test_jitter_factors_are_uniform(s):
    p = draw(jitter_strength=s)
    lo, hi = max(0.0, 1 - s), 1 + s
    for col in (ap.BRIGHTNESS, ap.CONTRAST, ap.SATURATION):
        assert stats.kstest(p[:, col], "uniform", args=(lo, hi - lo)).pvalue > ALPHA
    assert stats.kstest(p[:, ap.HUE], "uniform", args=(-s / 4, s / 2)).pvalue > ALPHA


def test_blur_sigma_is_uniform():
    assert stats.kstest(draw()[:, ap.SIGMA], "uniform", args=(0.1, 1.9)).pvalue > ALPHA


def test_flags_have_their_probabilities():
    p = draw()
    for col, prob in [(ap.JITTER, 0.8), (ap.GRAY, 0.2), (ap.BLUR, 0.5), (ap.FLIP, 0.5),
                      (ap.SOLARIZE, 0.1)]:  # fmt: skip
        assert set(np.unique(p[:, col])) <= {0.0, 1.0}
        assert stats.binomtest(int(p[:, col].sum()), N, prob).pvalue > ALPHA


def test_jitter_order_is_uniform_over_the_24_permutations():
    counts = np.bincount(draw()[:, ap.ORDER].astype(np.int64), minlength=24)
    assert len(counts) == 24 and stats.chisquare(counts).pvalue > ALPHA
    assert len({tuple(r) for r in ap.ORDERS}) == 24


def torchvision_boxes(n: int, h: int, w: int, scale: tuple[float, float]) -> np.ndarray:
    torch.manual_seed(11)
    img = torch.empty(3, h, w)
    return np.array([v2.RandomResizedCrop.get_params(img, list(scale), [3 / 4, 4 / 3])
                     for _ in range(n)])  # fmt: skip


@pytest.mark.parametrize(
    "h, w, scale, n_ref",
    [(32, 32, (0.2, 1.0), 4000), (375, 500, (0.08, 1.0), 4000), (8, 80, (0.08, 1.0), 1500)],
)  # (8, 80): most draws miss all 10 tries and take the fallback
def test_crop_boxes_follow_random_resized_crop(h, w, scale, n_ref):
    ours = ap.crop_boxes(np.random.default_rng(2), N, height=h, width=w, scale=scale)
    ref = torchvision_boxes(n_ref, h, w, scale)
    for boxes in (ours, ref):
        top, left, bh, bw = boxes.T
        assert (top >= 0).all() and (left >= 0).all()
        assert (top + bh <= h).all() and (left + bw <= w).all()
    area = lambda b: b[:, 2] * b[:, 3] / (h * w)  # noqa: E731
    log_ratio = lambda b: np.log(b[:, 3] / b[:, 2])  # noqa: E731
    rel_top = lambda b: (b[:, 0] + 0.5) / (h - b[:, 2] + 1)  # noqa: E731
    for f in (area, log_ratio, rel_top):
        assert stats.ks_2samp(f(ours), f(ref)).pvalue > ALPHA
    fallback = lambda b: (b[:, 2] == h) & (b[:, 3] == round(h * 4 / 3))  # noqa: E731
    if w / h > 4 / 3:  # the fallback box, as often as torchvision takes it
        k_ref, k = int(fallback(ref).sum()), int(fallback(ours).sum())
        table = [[k, N - k], [k_ref, n_ref - k_ref]]
        assert stats.chi2_contingency(table).pvalue > ALPHA
        if h == 8:
            assert k > N / 4


def test_crop_log_ratio_and_scale_before_rounding_are_torchvision_s():
    """The exact law on a large image, where rounding is negligible: scale ~ U(0.08, 1) and
    log-ratio ~ U(log 3/4, log 4/3) given that the first try fits (always for this image)."""
    b = ap.crop_boxes(np.random.default_rng(4), N, height=4000, width=4000, scale=(0.08, 0.5))
    assert stats.kstest(b[:, 2] * b[:, 3] / 4000**2, "uniform", args=(0.08, 0.42)).pvalue > ALPHA
    lo = math.log(3 / 4)
    assert stats.kstest(np.log(b[:, 3] / b[:, 2]), "uniform", args=(lo, -2 * lo)).pvalue > ALPHA


class Pictures(torch.utils.data.Dataset):
    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.data = torch.randint(0, 256, (8, 3, 30, 40), dtype=torch.uint8, generator=g)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.data[i], i % 2


def test_stage1_replays_from_seed_epoch_index_view():
    spec = views.ViewSpec(
        image_size=16,
        crop_scale=(0.2, 1.0),
        affine_degrees=10.0,
        affine_translate=0.1,
        jitter_strength=0.4,
        jitter_prob=0.8,
        grayscale_prob=0.2,
        blur_prob=0.5,
        hflip_prob=0.5,
    )
    ds = views.CropViews(Pictures(), spec, seed=3)
    a, b = ds[(2, 5)], views.CropViews(Pictures(), spec, seed=3)[(2, 5)]
    for u, v in zip(a, b, strict=True):
        assert torch.equal(torch.as_tensor(u), torch.as_tensor(v))
    assert a[0].shape == (3, 16, 16) and a[0].dtype == torch.uint8
    assert a[4].shape == (2, ap.NUM_COLUMNS)
    assert not torch.equal(a[4][0], a[4][1])  # the two views draw apart
    for other in (ds[(3, 5)], ds[(2, 4)], views.CropViews(Pictures(), spec, seed=4)[(2, 5)]):
        assert not torch.equal(a[4], other[4])
    torch.manual_seed(0)
    before = torch.get_rng_state()
    ds[(0, 0)]
    assert torch.equal(torch.get_rng_state(), before)  # the global RNG is never touched


class Squares(torch.utils.data.Dataset):
    """Images already at the output size (as CIFAR's 32 x 32): stage 1 defers their crop."""

    def __init__(self, size: int = 16, n: int = 8) -> None:
        g = torch.Generator().manual_seed(1)
        self.data = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.data[i], i % 2


@pytest.mark.parametrize("size", [16, 32])
def test_deferred_crop_equals_torchvision_resized_crop(size):
    """S x S images: stage 1 returns them whole with the box, stage 2 crops the batch; the result
    is TF.resized_crop of the same box within one uint8 level (its fixed-point uint8 kernel), and
    the boxes are what crop_box draws from the sample's generator, view 0 first."""
    spec = views.ViewSpec(
        image_size=size,
        crop_scale=(0.08, 1.0),
        affine_degrees=0.0,
        affine_translate=0.0,
        jitter_strength=0.4,
        jitter_prob=0.8,
        grayscale_prob=0.2,
        blur_prob=0.5,
        hflip_prob=0.5,
    )
    base = Squares(size, n=64)
    ds = views.CropViews(base, spec, seed=5)
    items = [ds[(1, i)] for i in range(len(base))]
    x = torch.cat([torch.stack([it[v] for it in items]) for v in (0, 1)])  # (2n, 3, S, S)
    rows = torch.cat([torch.stack([it[4][v] for it in items]) for v in (0, 1)])
    assert torch.equal(x[: len(base)], base.data)  # whole images travel to stage 2
    crops = augment.crop_resize(x.float(), rows[:, ap.TOP : ap.TOP + 4])
    worst, off = 0.0, 0
    for j in range(len(x)):
        i, v = j % len(base), j // len(base)
        rng = ap.sample_rng(5, 1, i)
        for _ in range(v + 1):  # view 0's crop and row come first from the sample's generator
            box = ap.crop_box(rng, height=size, width=size, scale=(0.08, 1.0))
            views.view_params(spec, rng)
        assert rows[j, ap.TOP : ap.TOP + 4].tolist() == [float(b) for b in box]
        assert rows[j, ap.THETA :].tolist() == ap.IDENTITY_THETA
        ref = TF.resized_crop(base.data[i], *box, [size, size], antialias=True).float()
        diff = (crops[j] - ref).abs()
        worst, off = max(worst, float(diff.max())), off + int((diff > 0).sum())
    assert worst <= 1.0  # within 1/255 after ToDtype
    assert off <= 0.01 * crops.numel()  # and nearly always equal


# MoCo v2's photometric ops at 16 px, no affine: the view spec of the stage-1 / stage-2 split tests
SPEC16 = views.ViewSpec(
    image_size=16,
    crop_scale=(0.2, 1.0),
    affine_degrees=0.0,
    affine_translate=0.0,
    jitter_strength=0.4,
    jitter_prob=0.8,
    grayscale_prob=0.2,
    blur_prob=0.5,
    hflip_prob=0.5,
)


def test_identity_box_leaves_a_cropped_view_unchanged_and_other_sizes_crop_in_stage1():
    spec = SPEC16
    item = views.CropViews(Pictures(), spec, seed=3)[(0, 2)]  # 30 x 40 images: cropped here
    assert item[4][:, ap.NUM_PARAMS :].tolist() == [[0.0, 0.0, 16.0, 16.0] + ap.IDENTITY_THETA] * 2
    x = torch.stack([item[0], item[1]]).float()
    assert torch.equal(augment.crop_resize(x, item[4][:, ap.TOP : ap.TOP + 4]), x)
    assert torch.equal(augment.affine_nearest(x, item[4][:, ap.THETA :]), x)


def test_deferred_crop_in_stage2_matches_the_uint8_crop_then_stage2():
    """Photometric with box columns = crop_resize, then the same ops as a row without them."""
    spec = SPEC16
    item = views.CropViews(Squares(16), spec, seed=2)[(0, 3)]
    x, rows = torch.stack([item[0], item[1]]), item[4]
    stage2 = augment.Photometric(jitter=True, grayscale=True, blur=True, hflip=True,
                                 blur_kernel=3, mean=(0.5,) * 3, std=(0.25,) * 3)  # fmt: skip
    cropped = augment.crop_resize(x.float(), rows[:, ap.TOP : ap.TOP + 4]).to(torch.uint8)
    assert torch.equal(stage2(x, rows), stage2(cropped, rows[:, : ap.NUM_PARAMS]))


def test_deferred_affine_and_crop_equal_torchvision_affine_then_resized_crop():
    """Digits' stage 1 (RandomAffine 15 deg, translate 0.1, then the crop) deferred to stage 2:
    TF.affine (nearest, fill 0) of the drawn angle and shift, then TF.resized_crop of the box,
    per image, against affine_nearest + crop_resize on the batch."""
    spec = views.ViewSpec(
        image_size=16,
        crop_scale=(0.5, 1.0),
        affine_degrees=15.0,
        affine_translate=0.1,
        jitter_strength=0.0,
        jitter_prob=0.8,
        grayscale_prob=0.0,
        blur_prob=0.0,
        hflip_prob=0.0,
    )
    base = Squares(16, n=48)
    ds = views.CropViews(base, spec, seed=9)
    items = [ds[(0, i)] for i in range(len(base))]
    x = torch.stack([it[0] for it in items]).float()
    rows = torch.stack([it[4][0] for it in items])
    out = augment.crop_resize(augment.affine_nearest(x, rows[:, ap.THETA :]),
                              rows[:, ap.TOP : ap.TOP + 4])  # fmt: skip
    worst = 0.0
    for i in range(len(base)):
        rng = ap.sample_rng(9, 0, i)
        angle, shift = ap.affine_params(rng, degrees=15.0, translate=0.1, height=16, width=16)
        turned = TF.affine(base.data[i], angle=angle, translate=shift, scale=1.0,
                           shear=[0.0, 0.0])  # fmt: skip
        assert torch.equal(augment.affine_nearest(x[i : i + 1], rows[i : i + 1, ap.THETA :])[0],
                           turned.float())  # fmt: skip
        box = ap.crop_box(rng, height=16, width=16, scale=(0.5, 1.0))
        ref = TF.resized_crop(turned, *box, [16, 16], antialias=True).float()
        worst = max(worst, float((out[i] - ref).abs().max()))
    assert worst <= 1.0


def test_the_digits_stage2_is_built_with_the_affine():
    from pretrain import config
    from pretrain.data import pipeline

    assert pipeline.photometric(config.load("digits_moco.yaml").data).affine
    assert not pipeline.photometric(config.load("cifar10_moco.yaml").data).affine


@pytest.mark.parametrize("h, w", [(32, 32), (375, 500), (8, 80), (80, 8)])
def test_per_sample_draws_equal_the_vectorised_ones(h, w):
    """The workers' plain-Python draws (crop_box, photometric_row) give the rows the tested
    vectorised samplers give from the same generator state."""
    kw = dict(jitter_strength=0.4, jitter_prob=0.8, grayscale_prob=0.2, blur_prob=0.5,
              hflip_prob=0.5, solarize_prob=0.1)  # fmt: skip
    for seed in range(2000):
        box = ap.crop_box(np.random.default_rng(seed), height=h, width=w, scale=(0.08, 1.0))
        ref = ap.crop_boxes(np.random.default_rng(seed), 1, height=h, width=w, scale=(0.08, 1.0))
        assert list(box) == ref[0].tolist()
    for seed in range(200):
        row = np.float32(ap.photometric_row(np.random.default_rng(seed), photo(**kw)))
        assert np.array_equal(row, ap.photometric(np.random.default_rng(seed), 1, photo(**kw))[0])


def test_compiled_stage2_equals_eager_and_the_config_refuses_it_for_workers():
    """``data.augment_compile``: every op on (deferred affine and crop, jitter in all orders,
    grayscale, blur, flip, solarize) through torch.compile equals the eager pass up to float
    rounding; the config builds it only for ``augment_on: device``."""
    from pretrain import config
    from pretrain.data import pipeline

    n, size = 64, 32
    spec = views.ViewSpec(image_size=size, crop_scale=(0.08, 1.0), affine_degrees=10.0,
                          affine_translate=0.1, jitter_strength=0.4, jitter_prob=0.8,
                          grayscale_prob=0.2, blur_prob=0.5, hflip_prob=0.5,
                          solarize_prob=0.2)  # fmt: skip
    ds = views.CropViews(Squares(size, n=n), spec, seed=4)
    items = [ds[(0, i)] for i in range(n)]
    x = torch.stack([it[0] for it in items])
    rows = torch.stack([it[4][0] for it in items])
    kw = dict(jitter=True, grayscale=True, blur=True, hflip=True, solarize=True, affine=True,
              blur_kernel=ap.blur_kernel_size(size), mean=(0.4, 0.5, 0.6),
              std=(0.2, 0.25, 0.3))  # fmt: skip
    eager = augment.Photometric(**kw)(x, rows)
    compiled = augment.Photometric(**kw, compiled=True)
    counters = torch._dynamo.utils.counters
    counters.clear()
    out = compiled(x, rows)
    assert counters["stats"]["unique_graphs"] >= 1  # it went through dynamo, not eager
    assert out.shape == eager.shape and out.dtype == eager.dtype
    assert (out - eager).abs().max() <= 1e-4  # fused loops round differently (~1e-5 seen)
    on = config.load("cifar10_moco.yaml", ["data.augment_compile=true"]).data
    assert pipeline.photometric(on).compiled
    assert not pipeline.photometric(config.load("cifar10_moco.yaml").data).compiled
    with pytest.raises(config.ConfigError, match="data.augment_compile"):
        config.load("cifar10_moco.yaml", ["data.augment_on=workers", "data.augment_compile=true"])
