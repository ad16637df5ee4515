"""``outliers`` against independent references: np.rot90 (and PIL's Image.rotate, FIRM's
rotation), a numpy loop re-deriving CutPaste from its sampled boxes, PIL-written images for outlier
exposure, and scipy's Kolmogorov-Smirnov test for the sampling distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image
from scipy import stats

import negatives
from negatives.outliers import Outliers, cutpaste, resized_crop_flip, turn, turn_index
from negmine_core.conventions import OUTLIER_LABEL, rotation_label
from tests.helpers.transforms import applied

MEAN, STD = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)


def batch(n: int, size: int, dtype: torch.dtype = torch.float64, seed: int = 0, channels: int = 3):
    g = torch.Generator().manual_seed(seed)
    x1 = torch.randn(n, channels, size, size, generator=g).to(dtype)
    x2 = torch.randn(n, channels, size, size, generator=g).to(dtype)
    return x1, x2, torch.arange(n)


def changed_slots(labels_out: torch.Tensor) -> np.ndarray:
    """Slots relabelled as outliers (the input labels are arange(N) >= 0)."""
    return np.flatnonzero(labels_out.numpy() < 0)


def check_untouched(outs, ins, slots: np.ndarray) -> None:
    keep = np.setdiff1d(np.arange(ins[0].shape[0]), slots)
    for out, x in zip(outs, ins):
        assert torch.equal(out[keep], x[keep])  # bit for bit


# ---------------------------------------------------------------- rotations


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("labels_mode", ["separate", "shared"])
def test_rotations_equal_numpy_rot90_with_one_angle_per_slot(labels_mode, dtype):
    torch.manual_seed(0)
    strategy = Outliers(ratio=0.5, kinds=["rotate"], rotation_labels=labels_mode)
    x1, x2, y = batch(64, 8, dtype)
    out1, out2, out_y = applied(strategy, x1, x2, y)
    assert out1.dtype == dtype and out2.dtype == dtype and out_y.dtype == torch.long
    slots = changed_slots(out_y)
    assert len(slots) == 32
    check_untouched((out1, out2, out_y), (x1, x2, y), slots)
    seen = set()
    for s in slots:
        # The angle of view 1, found by np.rot90 (counter-clockwise in the image plane).
        ref = [np.rot90(x1[s].numpy(), r, axes=(1, 2)) for r in (1, 2, 3)]
        turns = [r for r in (1, 2, 3) if np.array_equal(out1[s].numpy(), ref[r - 1])]
        assert len(turns) == 1
        r = turns[0]
        # View 2 is turned by the same angle: two views of one rotated image.
        assert np.array_equal(out2[s].numpy(), np.rot90(x2[s].numpy(), r, axes=(1, 2)))
        expected = -1 - r if labels_mode == "separate" else OUTLIER_LABEL
        assert out_y[s].item() == expected
        seen.add(r)
    assert seen == {1, 2, 3}


def test_rotation_direction_is_pils_image_rotate_as_in_firm():
    img = np.random.default_rng(0).integers(0, 256, (3, 6, 6), dtype=np.uint8)
    x = torch.from_numpy(np.stack([img] * 3))  # (3, 3, 6, 6) uint8: one copy per angle
    out = turn(x, turn_index(6, 6, (1, 2, 3)))  # row i: i + 1 quarter turns
    for i, angle in enumerate((90, 180, 270)):
        for c in range(3):
            ref = np.asarray(Image.fromarray(img[c]).rotate(angle))
            assert np.array_equal(out[i, c].numpy(), ref)


def test_turn_by_pixel_index_equals_numpys_rot90():
    """The strategy's one-gather rotation (a table of pixel indices per angle) = np.rot90."""
    x = torch.from_numpy(np.random.default_rng(1).integers(0, 256, (6, 2, 5, 5), dtype=np.uint8))
    choices = (1, 2, 3)
    pick = torch.tensor([0, 1, 2, 2, 1, 0])  # positions in choices
    out = turn(x, turn_index(5, 5, choices)[pick])
    for m in range(6):
        assert np.array_equal(out[m].numpy(), np.rot90(x[m].numpy(), choices[pick[m]], (1, 2)))
    flat = turn_index(4, 6, (2,))  # 180 deg keeps a non-square shape
    y = torch.randn(1, 3, 4, 6)
    assert torch.equal(turn(y, flat), torch.from_numpy(np.rot90(y.numpy(), 2, (2, 3)).copy()))


def test_label_convention_of_separate_rotations():
    assert [rotation_label(r) for r in (1, 2, 3)] == [-2, -3, -4]


def test_only_configured_angles_and_180_on_non_square_images():
    torch.manual_seed(0)
    strategy = Outliers(ratio=0.5, kinds=["rotate"], angles=[180])
    g = torch.Generator().manual_seed(0)
    x1, x2 = torch.randn(8, 3, 4, 6, generator=g), torch.randn(8, 3, 4, 6, generator=g)
    out1, out2, out_y = applied(strategy, x1, x2, torch.arange(8))
    slots = changed_slots(out_y)
    assert len(slots) == 4 and (out_y[slots] == rotation_label(2)).all()
    for s in slots:
        assert np.array_equal(out1[s].numpy(), np.rot90(x1[s].numpy(), 2, axes=(1, 2)))
        assert np.array_equal(out2[s].numpy(), np.rot90(x2[s].numpy(), 2, axes=(1, 2)))
    with pytest.raises(ValueError, match="90/270 deg need square images, got 4x6"):
        applied(Outliers(ratio=0.5), x1, x2, torch.arange(8))


# ---------------------------------------------------------------- fraction, identity, sizes


@pytest.mark.parametrize(
    ("n", "ratio", "expected"),
    [(8, 0.5, 4), (10, 0.25, 3), (7, 0.3, 2), (2, 0.5, 1), (64, 0.75, 48), (5, 0.05, 0)],
)
def test_fraction_is_exact(n, ratio, expected):
    torch.manual_seed(1)
    strategy = Outliers(ratio=ratio, kinds=["cutpaste"])
    x1, x2, y = batch(n, 6)
    for _ in range(3):
        out_y = applied(strategy, x1, x2, y)[2]
        assert len(changed_slots(out_y)) == expected
    stats_ = strategy.diagnostics()
    assert stats_["outlier_fraction"] == expected / n
    assert float(stats_["outliers_cutpaste"]) == expected


def test_ratio_zero_is_the_identity():
    strategy = negatives.create("outliers", ratio=0.0, kinds=["rotate", "cutpaste"],
                                rotation_labels="shared")  # fmt: skip
    x1, x2, y = batch(8, 4)
    out = applied(strategy, x1, x2, y)
    assert out[0] is x1 and out[1] is x2 and out[2] is y
    assert strategy.diagnostics()["outlier_fraction"] == 0.0
    assert strategy.state_dict() == {}


def test_check_sizes_rejects_a_batch_without_inliers():
    Outliers(ratio=0.75).check_sizes(queue_size=64, batch_size=32)
    with pytest.raises(ValueError, match=r"replaces 4 of the 4 images.*no in-distribution"):
        Outliers(ratio=0.9).check_sizes(queue_size=64, batch_size=4)
    x1, x2, y = batch(2, 4)
    with pytest.raises(ValueError, match="replaces 2 of the 2 images"):
        applied(Outliers(ratio=0.75), x1, x2, y)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"ratio": 1.0}, r"ratio must lie in \[0, 1\)"),
        ({"kinds": ["rotate", "mixup"]}, "kinds must be distinct names"),
        ({"kinds": []}, "kinds must be distinct names"),
        ({"angles": [45]}, "angles must be distinct values"),
        ({"rotation_labels": "each"}, "rotation_labels must be"),
        ({"kinds": ["rotate", "cutpaste"]}, "label -2 = OUTLIER_LABEL"),
        ({"kinds": ["cutpaste"], "patch_area": [0.2, 0.1]}, "patch_area must be a range"),
        ({"kinds": ["oe"]}, "kind 'oe' needs oe_path"),
        ({"oe_path": "/data/oe"}, "'oe' is not in kinds"),
        ({"kinds": ["oe"], "oe_path": "x", "oe_max_images": 0}, "oe_max_images must be"),
    ],
)
def test_bad_arguments_are_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        negatives.create("outliers", **kwargs)


# ---------------------------------------------------------------- CutPaste


def numpy_cutpaste(x: np.ndarray, b) -> np.ndarray:
    """Reference: copy each image's source rectangle onto its destination, one image at a time."""
    out = x.copy()
    for i in range(len(x)):
        h, w = int(b.h[i]), int(b.w[i])
        st, sl, dt, dl = (int(t[i]) for t in (b.src_top, b.src_left, b.dst_top, b.dst_left))
        out[i, :, dt : dt + h, dl : dl + w] = x[i, :, st : st + h, sl : sl + w]
    return out


@pytest.mark.parametrize(("height", "width"), [(32, 32), (12, 20)])
def test_cutpaste_equals_a_numpy_rederivation_from_its_boxes(height, width):
    torch.manual_seed(0)
    x = torch.randn(400, 3, height, width, dtype=torch.float64)
    out, b = cutpaste(x)
    assert np.array_equal(out.numpy(), numpy_cutpaste(x.numpy(), b))
    area, aspect = b.area.numpy(), b.aspect.numpy()
    assert ((area >= 0.02) & (area <= 0.15)).all() and ((aspect >= 0.3) & (aspect <= 3.3)).all()
    # Sizes from the sampled parameters: w = round(sqrt(a H W r)), h = round(sqrt(a H W / r)).
    w_ref = np.clip(np.round(np.sqrt(area * (height * width) * aspect)), 1, width)
    h_ref = np.clip(np.round(np.sqrt(area * (height * width) / aspect)), 1, height)
    assert np.array_equal(b.w.numpy(), w_ref) and np.array_equal(b.h.numpy(), h_ref)
    h, w = b.h.numpy(), b.w.numpy()
    for top, left in ((b.src_top, b.src_left), (b.dst_top, b.dst_left)):
        assert (top.numpy() >= 0).all() and (top.numpy() + h <= height).all()
        assert (left.numpy() >= 0).all() and (left.numpy() + w <= width).all()
    moved = (b.src_top != b.dst_top) | (b.src_left != b.dst_left)
    assert moved.all()
    # Area ratio uniform, log aspect uniform (KS test on the 400 draws).
    assert stats.kstest(area, stats.uniform(0.02, 0.13).cdf).pvalue > 1e-3
    lo, hi = math.log(0.3), math.log(3.3)
    assert stats.kstest(np.log(aspect), stats.uniform(lo, hi - lo).cdf).pvalue > 1e-3


def test_cutpaste_destination_is_uniform_over_the_other_corners():
    torch.manual_seed(0)
    x = torch.randn(3000, 1, 2, 2)
    _, b = cutpaste(x)  # on 2x2 images every patch is 1x1: 4 corners, 3 other than the source
    assert (b.h == 1).all() and (b.w == 1).all()
    src, dst = (b.src_top * 2 + b.src_left).numpy(), (b.dst_top * 2 + b.dst_left).numpy()
    assert (src != dst).all()
    offsets = (dst - src) % 4  # 1, 2 or 3, each with probability 1/3
    counts = np.bincount(offsets, minlength=4)[1:]
    assert stats.chisquare(counts).pvalue > 1e-3
    assert stats.chisquare(np.bincount(src, minlength=4)).pvalue > 1e-3


def locate_paste(before: np.ndarray, after: np.ndarray) -> tuple[int, int, int, int]:
    """The changed pixels form exactly one rectangle whose content is another rectangle of the
    same image; returns it as (top, left, h, w)."""
    changed = (before != after).any(axis=0)  # (H, W)
    rows, cols = np.flatnonzero(changed.any(1)), np.flatnonzero(changed.any(0))
    top, left, h, w = rows[0], cols[0], rows[-1] - rows[0] + 1, cols[-1] - cols[0] + 1
    assert changed[top : top + h, left : left + w].all() and changed.sum() == h * w
    patch = after[:, top : top + h, left : left + w]
    H, W = changed.shape
    sources = [(i, j) for i in range(H - h + 1) for j in range(W - w + 1)
               if np.array_equal(before[:, i : i + h, j : j + w], patch)]  # fmt: skip
    assert len(sources) == 1 and sources[0] != (top, left)
    return top, left, h, w


def test_cutpaste_slots_differ_in_one_pasted_rectangle_per_view():
    torch.manual_seed(3)
    strategy = Outliers(ratio=0.5, kinds=["cutpaste"])
    x1, x2, y = batch(16, 24, torch.float32)
    out1, out2, out_y = applied(strategy, x1, x2, y)
    slots = changed_slots(out_y)
    assert len(slots) == 8 and (out_y[slots] == OUTLIER_LABEL).all()
    check_untouched((out1, out2, out_y), (x1, x2, y), slots)
    boxes = [(locate_paste(x1[s].numpy(), out1[s].numpy()),
              locate_paste(x2[s].numpy(), out2[s].numpy())) for s in slots]  # fmt: skip
    assert any(a != b for a, b in boxes)  # each view draws its own patch
    for box in (b for pair in boxes for b in pair):
        assert 0.3 / 2 <= box[3] / box[2] <= 3.3 * 2  # aspect w / h, up to pixel rounding


# ---------------------------------------------------------------- outlier exposure

COLOURS = [(255, 0, 0), (0, 128, 255), (10, 200, 30), (77, 77, 77), (250, 250, 5)]


def write_pngs(folder) -> list[tuple[int, int, int]]:
    """Constant-colour PNGs of several sizes, one in a subfolder, one grayscale, plus noise."""
    (folder / "sub").mkdir(parents=True)
    sizes = [(20, 30), (16, 16), (40, 12), (9, 9)]
    for i, (colour, size) in enumerate(zip(COLOURS[:4], sizes)):
        where = folder / "sub" if i == 2 else folder
        Image.new("RGB", size, colour).save(where / f"img{i}.png")
    Image.new("L", (18, 18), 77).save(folder / "gray.PNG")  # same value as COLOURS[3]
    (folder / "notes.txt").write_text("not an image")
    return COLOURS[:4]


def unnormalise(x: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(MEAN, dtype=x.dtype)[:, None, None]
    std = torch.tensor(STD, dtype=x.dtype)[:, None, None]
    return x * std + mean


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_oe_from_a_folder_of_pngs(tmp_path, dtype):
    colours = write_pngs(tmp_path)
    strategy = Outliers(ratio=0.5, kinds=["oe"], oe_path=str(tmp_path))
    strategy.bind_data(16, MEAN, STD)
    bank = strategy.oe_images
    assert bank.dtype == torch.uint8 and tuple(bank.shape) == (5, 3, 16, 16)
    # Constant images stay constant through resizing: the bank holds exactly the colours.
    found = sorted(tuple(int(v) for v in img[:, 0, 0]) for img in bank)
    assert found == sorted([*colours, (77, 77, 77)])
    assert all((img == img[:, :1, :1]).all() for img in bank)
    torch.manual_seed(0)
    x1, x2, y = batch(10, 16, dtype)
    out1, out2, out_y = applied(strategy, x1, x2, y)
    assert out1.dtype == dtype and out1.shape == x1.shape
    slots = changed_slots(out_y)
    assert len(slots) == 5 and (out_y[slots] == OUTLIER_LABEL).all()
    check_untouched((out1, out2, out_y), (x1, x2, y), slots)
    targets = torch.tensor(found, dtype=torch.float64) / 255
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    for s in slots:
        pixels = [unnormalise(o[s]).double().reshape(3, -1) for o in (out1, out2)]
        for p in pixels:  # every view is one of the colours, constant over the image
            assert (p.max(1).values - p.min(1).values).max() < tol
        which = [int((targets - p[:, 0]).abs().max(1).values.argmin()) for p in pixels]
        for p, i in zip(pixels, which):
            assert (p[:, 0] - targets[i]).abs().max() < tol
        assert targets[which[0]].equal(targets[which[1]])  # both views: one image


def test_oe_from_a_npy_file_with_a_seeded_cap(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (20, 8, 8, 3), dtype=np.uint8)
    np.save(tmp_path / "oe.npy", images)
    banks = []
    for seed in (3, 3, 4):
        strategy = Outliers(ratio=0.25, kinds=["oe"], oe_path=str(tmp_path / "oe.npy"),
                            oe_max_images=6, seed=seed)  # fmt: skip
        strategy.bind_data(8, MEAN, STD)
        banks.append(strategy.oe_images)
    assert tuple(banks[0].shape) == (6, 3, 8, 8)
    # Each kept image is one of the file's, without repeats (found by exact comparison).
    rows = [[i for i in range(20) if np.array_equal(images[i], img.permute(1, 2, 0).numpy())]
            for img in banks[0]]  # fmt: skip
    assert all(len(r) == 1 for r in rows) and len({r[0] for r in rows}) == 6
    assert torch.equal(banks[0], banks[1]) and not torch.equal(banks[0], banks[2])
    # Views: normalised with the bound mean/std, so un-normalised pixels lie in [0, 1].
    torch.manual_seed(0)
    x1, x2, y = batch(8, 8)
    out1, out2, out_y = applied(strategy, x1 + 10, x2 + 10, y)  # inputs far outside
    slots = changed_slots(out_y)
    assert len(slots) == 2
    for o in (out1, out2):
        pixels = unnormalise(o[slots])
        assert pixels.min() >= -1e-12 and pixels.max() <= 1 + 1e-12


def test_oe_npy_resized_like_pil(tmp_path):
    images = np.random.default_rng(1).integers(0, 256, (3, 8, 8, 3), dtype=np.uint8)
    np.save(tmp_path / "oe.npy", images)
    strategy = Outliers(ratio=0.25, kinds=["oe"], oe_path=str(tmp_path / "oe.npy"))
    strategy.bind_data(12, MEAN, STD)
    for img, ref in zip(strategy.oe_images, images):
        pil = np.asarray(Image.fromarray(ref).resize((12, 12), Image.Resampling.BILINEAR))
        assert np.array_equal(img.permute(1, 2, 0).numpy(), pil)
    strategy.bind_data(12, (0.5,), (0.5,))  # grayscale training images: ITU-R 601 luma
    luma = np.asarray(
        Image.fromarray(images[0]).convert("L").resize((12, 12), Image.Resampling.BILINEAR)
    )
    assert tuple(strategy.oe_images.shape) == (3, 1, 12, 12)
    assert np.array_equal(strategy.oe_images[0, 0].numpy(), luma)


def test_missing_or_empty_oe_path_fails_at_bind_with_what_to_put_there(tmp_path):
    missing = tmp_path / "nowhere"
    strategy = Outliers(ratio=0.5, kinds=["oe"], oe_path=str(missing))  # no I/O yet
    with pytest.raises(
        ValueError, match=rf"oe_path '{missing}' does not exist.*300K_random_images"
    ):
        strategy.bind_data(16, MEAN, STD)
    (tmp_path / "empty" / "deeper").mkdir(parents=True)
    (tmp_path / "empty" / "readme.txt").write_text("x")
    strategy = Outliers(ratio=0.5, kinds=["oe"], oe_path=str(tmp_path / "empty"))
    with pytest.raises(ValueError, match=r"holds no images: put there a folder of \.png"):
        strategy.bind_data(16, MEAN, STD)
    np.save(tmp_path / "bad.npy", np.zeros((4, 8, 8), dtype=np.float32))
    strategy = Outliers(ratio=0.5, kinds=["oe"], oe_path=str(tmp_path / "bad.npy"))
    with pytest.raises(ValueError, match=r"holds float32 \(4, 8, 8\); put there"):
        strategy.bind_data(8, MEAN, STD)
    x1, x2, y = batch(4, 8)
    with pytest.raises(ValueError, match="needs bind_data"):
        applied(strategy, x1, x2, y)


def linear_image(n: int, size: int, a: float, b: float) -> torch.Tensor:
    ys, xs = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    return (a * xs + b * ys + 1.0).double().expand(n, 1, size, size).contiguous()


def test_resized_crop_flip_identity_and_flip():
    x = torch.randn(4, 3, 10, 10, dtype=torch.float64)
    same = resized_crop_flip(x, scale=(1.0, 1.0), aspect_range=(1.0, 1.0), flip_prob=0.0)
    torch.testing.assert_close(same, x, rtol=0, atol=1e-12)
    mirrored = resized_crop_flip(x, scale=(1.0, 1.0), aspect_range=(1.0, 1.0), flip_prob=1.0)
    torch.testing.assert_close(mirrored, x.flip(-1), rtol=0, atol=1e-12)


def test_resized_crop_scale_and_aspect_from_the_slopes_of_a_linear_image():
    """Bilinear sampling of f = a x + b y + c is exact, so each view is linear again with slopes
    (+-a * crop width, b * crop height) in units of the image side."""
    torch.manual_seed(0)
    a, b, size = 0.3, 0.7, 16
    views = resized_crop_flip(linear_image(500, size, a, b))[:, 0, 1:-1, 1:-1]  # clamped edges out
    sx = (views[:, :, 1:] - views[:, :, :-1]).numpy()  # (M, S-2, S-3)
    sy = (views[:, 1:, :] - views[:, :-1, :]).numpy()
    eps = 1e-5  # affine_grid builds its base grid in single precision
    assert np.ptp(sx, axis=(1, 2)).max() < eps and np.ptp(sy, axis=(1, 2)).max() < eps
    cw, ch = np.abs(sx.mean((1, 2))) / a, sy.mean((1, 2)) / b
    area, aspect = cw * ch, cw / ch
    assert ((cw <= 1 + eps) & (ch <= 1 + eps)).all()
    inside = (cw < 1 - eps) & (ch < 1 - eps)  # crops whose sides were not capped
    assert inside.mean() > 0.5
    assert (area[inside] >= 0.5 - eps).all() and (area <= 1 + eps).all()
    assert ((aspect >= 0.75 - eps) & (aspect <= 4 / 3 + eps)).all()
    assert abs((sx[:, 0, 0] < 0).mean() - 0.5) < 0.08  # flipped half of the time


# ---------------------------------------------------------------- determinism and edge cases


def mixed(tmp_path) -> Outliers:
    write_pngs(tmp_path)
    strategy = negatives.create("outliers", ratio=0.5, kinds=["rotate", "cutpaste", "oe"],
                                rotation_labels="shared", oe_path=str(tmp_path))  # fmt: skip
    return strategy


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_same_rng_state_gives_the_same_batch(tmp_path, dtype):
    strategy = mixed(tmp_path)
    strategy.bind_data(8, MEAN, STD)
    x1, x2, y = batch(16, 8, dtype)
    runs = []
    for seed in (5, 5, 6):
        torch.manual_seed(seed)
        runs.append(applied(strategy, x1, x2, y))
    assert all(torch.equal(a, b) for a, b in zip(runs[0], runs[1]))
    assert not all(torch.equal(a, b) for a, b in zip(runs[0], runs[2]))
    assert all(r.dtype == x.dtype for r, x in zip(runs[0], (x1, x2, y)))
    counts = strategy.diagnostics()
    assert sum(float(counts[f"outliers_{k}"]) for k in ("rotate", "cutpaste", "oe")) == 8


def test_two_by_two_batch(tmp_path):
    strategy = mixed(tmp_path)
    strategy.bind_data(2, MEAN, STD)
    x1, x2, y = batch(2, 2)
    for seed in range(6):
        torch.manual_seed(seed)
        out1, out2, out_y = applied(strategy, x1, x2, y)
        slots = changed_slots(out_y)
        assert len(slots) == 1 and out_y[slots[0]] == OUTLIER_LABEL
        check_untouched((out1, out2, out_y), (x1, x2, y), slots)
    cut = Outliers(ratio=0.5, kinds=["cutpaste"])
    out1, _, out_y = applied(cut, x1, x2, y)
    (s,) = changed_slots(out_y)
    top, left, h, w = locate_paste(x1[s].numpy(), out1[s].numpy())  # one pixel moved
    assert (h, w) == (1, 1)


@pytest.mark.cuda
def test_cuda_batch_without_host_syncs(tmp_path):
    strategy = mixed(tmp_path).to("cuda")
    strategy.bind_data(8, MEAN, STD)  # after .to(device): buffers follow the batch
    x1, x2, y = (t.cuda() for t in batch(16, 8, torch.float32))
    applied(strategy, x1, x2, y)  # first call moves the OE images once
    torch.cuda.set_sync_debug_mode("error")
    try:
        out1, out2, out_y = applied(strategy, x1, x2, y)
        stats_ = strategy.diagnostics()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out1.device == x1.device and out_y.device == y.device
    assert (out_y < 0).sum().item() == 8 and stats_["outliers_oe"].device == x1.device
