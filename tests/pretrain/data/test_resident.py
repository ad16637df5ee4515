"""``data.resident: device``: the training split on the device, batches and both views'
augmentation made there. Checked against the loader path (``views.CropViews``, numpy draws per
sample on the host; ``F.interpolate`` crops; ``loaders.eval_transform``): the same rows from the
same uniforms, the same distributions (KS, binomial, chi-square), crops within one level; the cache,
the sampler semantics at 1 and 2 ranks, exact resume, 0 syncs and no host copy per step."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats
from torch.utils._python_dispatch import TorchDispatchMode

from negmine_core.contract.sync_counter import SyncCounter
from negmine_core.step import Batch
from pretrain import build, config
from pretrain.config import ConfigError
from pretrain.data import augment, datasets, imagefiles, loaders, resident, views
from pretrain.data import augment_params as ap
from pretrain.data import device_params as dp
from pretrain.data.resident_views import EvalBatches, ResidentViews
from pretrain.engine import loop
from pretrain.testing.fakedata import random_images, write_png
from tests.helpers.runs import lines, pretrain, tensors

MOCO_V2 = dict(
    crop_scale=(0.2, 1.0), jitter_strength=0.4, jitter_prob=0.8, grayscale_prob=0.2,
    blur_prob=0.5, hflip_prob=0.5,
)  # fmt: skip


def spec(size: int = 32, affine: bool = False, **kw) -> views.ViewSpec:
    args = {**MOCO_V2, **kw}
    return views.ViewSpec(image_size=size, affine_degrees=15.0 if affine else 0.0,
                          affine_translate=0.1 if affine else 0.0, **args)  # fmt: skip


@pytest.mark.parametrize(
    "size,height,width,affine",
    [(32, 32, 32, False), (16, 16, 16, True), (64, 96, 96, False), (32, 8, 80, False)],
)
def test_rows_from_the_same_uniforms_are_the_loader_rows(size, height, width, affine):
    """The loader's deferred_row draws (affine 3, crop 22, photometric 11) from one numpy
    generator; the same uniforms through device_params give the same float32 row."""
    s = spec(size, affine)
    n = 3000
    k = dp.UNIFORMS if affine else dp.UNIFORMS - dp.AFFINE_U  # no affine: the loader draws none
    u = np.zeros((n, dp.UNIFORMS))
    want = []
    for i in range(n):  # the same generator state twice: its stream, then the loader's draws
        u[i, dp.UNIFORMS - k :] = np.random.default_rng([7, i]).random(k)
        want.append(_deferred_row(s, np.random.default_rng([7, i]), height, width))
    got = dp.view_rows(torch.from_numpy(u), s, height=height, width=width).numpy()
    want = np.asarray(want, dtype=np.float32)
    np.testing.assert_array_equal(got[:, : ap.THETA], want[:, : ap.THETA])  # params + box
    np.testing.assert_allclose(got[:, ap.THETA :], want[:, ap.THETA :], rtol=0, atol=1e-6)
    if (height, width) == (8, 80):  # the fallback box is taken by some rows
        assert (got[:, ap.WIDTH] == ap.fallback(8, 80, ap.RATIO)[3]).mean() > 0.1


def _deferred_row(s: views.ViewSpec, rng, height: int, width: int) -> list[float]:
    """views.deferred_row for an image of height x width (it assumes S x S)."""
    theta = ap.IDENTITY_THETA
    if s.affine_degrees > 0 or s.affine_translate > 0:
        angle, shift = ap.affine_params(rng, degrees=s.affine_degrees,
                                        translate=s.affine_translate, height=height,
                                        width=width)  # fmt: skip
        theta = ap.inverse_affine_matrix(angle, shift)
    box = ap.crop_box(rng, height=height, width=width, scale=s.crop_scale)
    return views.view_params(s, rng) + [float(v) for v in box] + theta


def _views(n: int, size: int, seed: int = 3, **kw) -> ResidentViews:
    images = torch.zeros(n, 3, size, size, dtype=torch.uint8)
    sampler = loaders.ResumableSampler(n, 64, seed=seed)
    return ResidentViews(images, torch.zeros(n, dtype=torch.int64), spec(size, **kw),
                                  seed, sampler)  # fmt: skip


def _loader_rows(n: int, size: int, seed: int = 3, epoch: int = 0, **kw) -> np.ndarray:
    s = spec(size, **kw)
    out = []
    for i in range(n):
        rng = ap.sample_rng(seed, epoch, i)
        out.append([views.deferred_row(s, rng), views.deferred_row(s, rng)])
    return np.asarray(out, dtype=np.float32)  # (n, 2, NUM_COLUMNS)


def _resident_rows(n: int, size: int, seed: int = 3, epoch: int = 0, **kw) -> np.ndarray:
    rv = _views(n, size, seed, **kw)
    u = rv.uniforms(epoch).transpose(0, 1).flatten(0, 1)  # (n * 2, UNIFORMS), sample-major
    return dp.view_rows(u, rv.spec, height=size, width=size).view(n, 2, -1).numpy()


def test_resident_and_loader_draws_have_the_same_distributions():
    """KS on continuous columns (crop area, aspect, position; jitter factors, hue, sigma),
    binomial frequencies of the flags (jitter, grayscale, blur, flip) and a chi-square of the op
    order, resident (torch, on the device) vs loader (numpy per sample): 12,000 samples x 2
    views; a shifted crop scale is caught by the same KS test."""
    n, size = 6000, 32
    a = _resident_rows(n, size).reshape(-1, ap.NUM_COLUMNS).astype(np.float64)
    b = _loader_rows(n, size).reshape(-1, ap.NUM_COLUMNS).astype(np.float64)

    def features(r: np.ndarray) -> dict[str, np.ndarray]:
        h, w = r[:, ap.HEIGHT], r[:, ap.WIDTH]
        return {"area": h * w, "aspect": w / h, "top": r[:, ap.TOP], "left": r[:, ap.LEFT],
                "brightness": r[:, ap.BRIGHTNESS], "contrast": r[:, ap.CONTRAST],
                "saturation": r[:, ap.SATURATION], "hue": r[:, ap.HUE],
                "sigma": r[:, ap.SIGMA]}  # fmt: skip

    fa, fb = features(a), features(b)
    for key in fa:
        p = stats.ks_2samp(fa[key], fb[key]).pvalue
        assert p > 1e-4, (key, p)
    for col, prob in ((ap.JITTER, 0.8), (ap.GRAY, 0.2), (ap.BLUR, 0.5), (ap.FLIP, 0.5)):
        for rows in (a, b):  # each path against the configured probability
            k = int(rows[:, col].sum())
            assert stats.binomtest(k, len(rows), prob).pvalue > 1e-4, (col, k)
    table = np.stack([np.bincount(r[:, ap.ORDER].astype(int), minlength=24) for r in (a, b)])
    assert stats.chi2_contingency(table).pvalue > 1e-4
    shifted = _loader_rows(2000, size, crop_scale=(0.3, 1.0)).reshape(-1, ap.NUM_COLUMNS)
    area = shifted[:, ap.HEIGHT] * shifted[:, ap.WIDTH]
    assert stats.ks_2samp(fa["area"], area).pvalue < 1e-6  # the test can fail


def test_two_views_of_a_sample_are_independent_and_epochs_differ():
    rows = _resident_rows(4000, 32)
    r = stats.pearsonr(rows[:, 0, ap.BRIGHTNESS], rows[:, 1, ap.BRIGHTNESS])[0]
    assert abs(r) < 0.06
    other = _resident_rows(4000, 32, epoch=1)
    assert not np.array_equal(rows, other)


@pytest.mark.parametrize("affine", [False, True])
def test_device_crop_equals_the_loader_crop(affine):
    """Images not at the output size are cropped on the device (crop_resize_to, after the affine
    when configured): bit-equal to the loader's crop (torch's uint8 antialiased resize), down-
    and upsampling; with the affine (TF.affine there) equal on > 99 % of pixels."""
    torch.manual_seed(0)
    images = torch.from_numpy(random_images(48, 40, seed=1)).permute(0, 3, 1, 2).contiguous()
    images = F.avg_pool2d(images.float(), 3, 1, 1).round().to(torch.uint8)  # smoother: realistic
    s = spec(24, affine, crop_scale=(0.1, 1.0))
    rv = ResidentViews(images, torch.arange(48), s, 0, loaders.ResumableSampler(48, 16,
                                seed=0))  # fmt: skip
    u = torch.rand(48, dp.UNIFORMS, dtype=torch.float64)
    rows = dp.view_rows(u, s, height=40, width=40)
    got = rv.crop(images, rows)
    want = []
    for img, row in zip(images, rows, strict=True):
        if affine:
            angle, shift = _angle_shift(row[ap.THETA : ap.THETA + 6])
            img = views.TF.affine(img, angle=angle, translate=shift, scale=1.0, shear=[0.0, 0.0])
        top, left, h, w = (int(v) for v in row[ap.TOP : ap.WIDTH + 1])
        want.append(F.interpolate(img[None, :, top : top + h, left : left + w], size=(24, 24),
                                  mode="bilinear", antialias=True)[0])  # fmt: skip
    want = torch.stack(want)
    diff = (got.int() - want.int()).abs()
    if affine:  # TF.affine rebuilds theta from (angle, shift): a nearest pick may differ
        assert (diff == 0).float().mean() > 0.99
    else:
        assert diff.max() == 0
    assert (rows[:, ap.HEIGHT] > 24).any() and (rows[:, ap.HEIGHT] < 24).any()  # both ways


def _angle_shift(theta: torch.Tensor) -> tuple[float, list[int]]:
    """(angle, [tx, ty]) back from the inverse matrix of device_params.affine_theta."""
    cos, sin = float(theta[0]), float(theta[1])
    angle = float(np.degrees(np.arctan2(sin, cos)))
    m = np.array([[cos, sin], [-sin, cos]])
    tx, ty = np.linalg.solve(m, -np.array([float(theta[2]), float(theta[5])]))
    return angle, [round(tx), round(ty)]


def test_antialias_weights_reduce_to_bilinear_when_upsampling():
    start, length = torch.tensor([0, 3, 5, 1]), torch.tensor([32, 20, 9, 31])
    a = augment.antialias_weights(start, length, 32, 32)
    b = augment.resize_weights(start, length, 32, 32)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_eval_batches_equal_the_eval_transform():
    imgs = torch.from_numpy(random_images(10, 40, seed=2)).permute(0, 3, 1, 2)
    imgs = torch.cat([imgs[:, :, :, :36]])  # 40 x 36: a non-square resize
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    for size, rs in ((24, 28), (32, 36)):
        tf = loaders.eval_transform(size=size, resize=rs, mean=mean, std=std)
        ev = EvalBatches(imgs, torch.arange(10), batch=4, size=size, resize=rs,
                                  mean=mean, std=std)  # fmt: skip
        got = torch.cat([x for x, _ in ev])
        want = torch.stack([tf(views.TF.to_image(i)) for i in imgs])
        assert got.shape == want.shape
        tol = 1.0 / 255 / min(std) + 1e-5
        assert (got - want).abs().max() <= tol
        assert [int(v) for _, y in ev for v in y] == list(range(10))


def _folder(root: Path, n: int = 12, size: int = 20, seed: int = 0) -> list[Path]:
    imgs = random_images(n, size, seed)
    paths = [root / "train" / f"c{i % 3}" / f"{i:03d}.png" for i in range(n)]
    for p, img in zip(paths, imgs, strict=True):
        write_png(p, img)
    return paths


def test_image_files_are_decoded_once_cached_and_invalidated(tmp_path, monkeypatch):
    paths = _folder(tmp_path / "d")
    ds = datasets.build("imagefolder", str(tmp_path / "d"), "train")
    cache = tmp_path / "cache"
    images, labels, _ = resident.load(ds, cache, workers=0)
    want = torch.stack([imagefiles.read_image(p) for p, _ in ds.samples])
    assert torch.equal(images, want)
    assert labels.tolist() == [y for _, y in ds.samples]
    assert len(list(cache.glob("resident-*.npy"))) == 3  # images, labels, checksums

    def no_decode(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("decoded again")

    monkeypatch.setattr(resident, "decode", no_decode)
    again, _, _ = resident.load(ds, cache, workers=0)  # from the cache
    assert torch.equal(again, want)
    write_png(paths[0], random_images(1, 20, seed=9)[0])  # a changed file: a new key
    st = paths[0].stat()
    os.utime(paths[0], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    with pytest.raises(AssertionError, match="decoded again"):
        resident.load(ds, cache, workers=0)


def test_images_of_different_sizes_are_refused_by_device_and_skipped_by_auto(tmp_path):
    _folder(tmp_path / "d", n=6)
    write_png(tmp_path / "d" / "train" / "c1" / "odd.png", random_images(1, 24, 1)[0])
    ds = datasets.build("imagefolder", str(tmp_path / "d"), "train")
    with pytest.raises(resident.NotResidentError, match="odd.png"):
        resident.decode(ds, workers=0, batch=3)
    with pytest.raises(resident.NotResidentError, match="odd.png"):
        resident.decode(ds, workers=0, batch=256)  # inside one batch


def test_auto_is_off_on_a_cpu_and_follows_free_memory_on_cuda(monkeypatch):
    assert resident.resolve("auto", "cpu", 1) == "off"
    assert resident.resolve("device", "cpu", 10**15) == "device"
    assert resident.resolve("off", "cuda", 1) == "off"
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1000, 4000))
    assert resident.resolve("auto", "cuda", 500) == "device"
    assert resident.resolve("auto", "cuda", 501) == "off"


def test_config_refuses_device_without_the_two_stage_pipeline():
    with pytest.raises(ConfigError, match="data.resident"):
        config.load("digits_moco.yaml", ["data.resident=device", "data.augment_on=workers"])
    with pytest.raises(ConfigError, match="data.resident"):
        config.load(
            "cifar10_moco.yaml",
            ["data.resident=device", "data.decode_on=device", "data.name=imagefolder"],
        )
    with pytest.raises(ConfigError, match="data.resident"):
        config.load("digits_moco.yaml", ["data.resident=yes"])
    assert config.load("digits_moco.yaml").data.resident == "auto"


def _batches(world: int, rank: int, epoch: int, start: int, n: int = 100, gb: int = 16):
    images = torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, 3, 32, 32)
    labels = torch.arange(n) % 7
    sampler = loaders.ResumableSampler(n, gb, seed=5, rank=rank, world_size=world)
    sampler.set_epoch(epoch, start)
    rv = ResidentViews(images.contiguous(), labels, spec(32), 5, sampler)
    return list(rv)


def test_ranks_split_each_global_batch_and_see_every_sample_once_per_epoch():
    one = _batches(1, 0, epoch=2, start=0)
    ranks = [_batches(2, r, epoch=2, start=0) for r in range(2)]
    assert len(one) == 100 // 16 and all(len(r) == len(one) for r in ranks)
    seen = []
    for t, full in enumerate(one):
        parts = [ranks[r][t] for r in range(2)]
        for k in range(5):  # x1, x2, y, index, params: the rank halves of the one-process batch
            assert torch.equal(torch.cat([p[k] for p in parts]), full[k])
        assert torch.equal(full[0][:, 0, 0, 0].long(), full[3])  # the image of that index
        assert torch.equal(full[2], full[3] % 7)
        seen += full[3].tolist()
    assert len(seen) == len(set(seen)) == 96  # drop_last of the global batch, no repeats
    sampler = loaders.ResumableSampler(100, 16, seed=5)
    sampler.set_epoch(2)
    assert seen == [i for _, i in sampler]  # the loader path's order


def test_support_views_come_with_their_rows_and_leave_the_two_views_unchanged():
    """FNC's support crops (data.support_views): a sixth item (n, V, 3, S, S) and 2 + V rows;
    the two views' rows are the first two whatever V (drawn from their own uniform columns)."""
    images = torch.from_numpy(random_images(20, 40, seed=4)).permute(0, 3, 1, 2).contiguous()
    sampler = loaders.ResumableSampler(20, 8, seed=1)
    plain = next(iter(ResidentViews(images, torch.arange(20), spec(24), 1, sampler)))
    rv = ResidentViews(images, torch.arange(20), spec(24), 1, sampler, support_views=3)
    x1, x2, y, idx, rows, support = next(iter(rv))
    assert support.shape == (8, 3, 3, 24, 24) and support.dtype == torch.uint8
    assert rows.shape == (8, 5, ap.NUM_COLUMNS)
    assert torch.equal(rows[..., ap.TOP :], rv.whole.expand(8, 5, -1))  # cropped here
    assert torch.equal(idx, plain[3]) and torch.equal(y, plain[2])
    assert torch.equal(rows[:, :2], plain[4]) and torch.equal(x1, plain[0])
    assert not torch.equal(support[:, 0], x1)


def test_a_mid_epoch_start_replays_the_rest_of_the_epoch():
    full = _batches(2, 1, epoch=3, start=0)
    tail = _batches(2, 1, epoch=3, start=4)
    assert len(tail) == len(full) - 4
    for a, b in zip(full[4:], tail, strict=True):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y)


RESIDENT = ["data.resident=device", "data.jitter_strength=0.4", "data.grayscale_prob=0.2",
            "data.blur_prob=0.5", "data.hflip_prob=0.5"]  # fmt: skip


def test_stopped_mid_epoch_and_resumed_equals_uninterrupted(tmp_path):
    """train.max_steps mid-epoch 2 writes a checkpoint; the same command with the limit lifted
    continues; the end state equals an uninterrupted run's."""
    epochs = ["train.epochs=2", "eval.knn_every=2", "data.subset=40", *RESIDENT]  # 400 images
    full, cut = tmp_path / "full", tmp_path / "cut"
    done = pretrain(full, *epochs)
    assert done.returncode == 0, done.stderr
    assert "data.resident=device" in done.stdout
    first = pretrain(cut, *epochs, "train.max_steps=17")  # 12 steps per epoch
    assert first.returncode == 0, first.stderr
    mid = torch.load(cut / "checkpoints" / "last.pt", weights_only=True)
    assert (mid["epoch"], mid["step_in_epoch"]) == (1, 5)
    resumed = pretrain(cut, *epochs, "train.max_steps=0")
    assert resumed.returncode == 0, resumed.stderr
    a = torch.load(full / "checkpoints" / "last.pt", weights_only=True)
    b = torch.load(cut / "checkpoints" / "last.pt", weights_only=True)
    ta = tensors({k: a[k] for k in ("model", "queue", "optimizer", "epoch_stats")})
    tb = tensors({k: b[k] for k in ("model", "queue", "optimizer", "epoch_stats")})
    assert ta.keys() == tb.keys() and len(ta) > 50
    for k in ta:
        assert torch.equal(ta[k], tb[k]), k
    ea, eb = lines(full, "epoch"), lines(cut, "epoch")
    assert ea[-1]["knn_top1"] == eb[-1]["knn_top1"]


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, dict]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.ops.append((str(func.overloadpacket.__name__), dict(kwargs or {})))
        return func(*args, **(kwargs or {}))


def test_a_steady_state_step_has_no_sync_and_no_host_copy(tmp_path):
    """loop.setup builds the resident run; after a warm step, drawing a batch and the whole
    train_step dispatch 0 would-be syncs (items, data-dependent shapes, device<->host copies,
    tensors built from host data); the batch itself is gathers and arithmetic: no random draw
    (the epoch's table is drawn once), no permutation, no copy to another device."""
    overrides = ["model.width=8", "train.batch_size=16", "moco.queue_size=64",
                 "train.progress_bar=false", "train.amp='off'", f"out_dir={tmp_path}",
                 *RESIDENT]  # fmt: skip
    cfg = config.load("digits_moco.yaml", overrides)
    run = loop.setup(cfg)
    assert run.data.pipeline == "resident" and isinstance(run.data.train_loader,
                                                        ResidentViews)  # fmt: skip
    assert isinstance(run.data.test_loader, EvalBatches)
    run.data.sampler.set_epoch(0)
    it = iter(run.data.train_loader)
    x1, x2, y, _, params = next(it)
    loop.train_step(run, Batch.make(x1, x2, y, [params]), 0.5)
    with SyncCounter() as syncs:
        for _ in range(2):
            x1, x2, y, _, params = next(it)
            loop.train_step(run, Batch.make(x1, x2, y, [params]), 0.5)
    assert syncs.count == 0, syncs.report()
    with _Ops() as ops:
        next(it)
    names = [name for name, _ in ops.ops]
    assert "index_select" in names
    banned = {"rand", "randperm", "uniform", "lift_fresh", "lift_fresh_copy", "copy_",
              "_local_scalar_dense", "nonzero"}  # fmt: skip
    assert not banned & set(names), sorted(banned & set(names))
    moves = [kw for name, kw in ops.ops if name == "_to_copy" and "device" in kw]
    assert not moves, moves  # dtype conversions only, never to another device


def test_knn_monitor_batches_equal_the_loaders(tmp_path):
    """digits resident: the bank and held-out splits are the embedded arrays on the device, in
    the eval transform (identity resize at 16 px): equal to the loader's batches."""
    cfg = config.load("digits_moco.yaml", ["data.resident=device", f"out_dir={tmp_path}"])
    held = build.datasets_for(cfg, "cpu")
    ref = build.datasets_for(config.load("digits_moco.yaml", [f"out_dir={tmp_path}"]), "cpu")
    assert held.pipeline == "resident" and ref.pipeline == "loader"
    for a, b in ((held.test_loader, ref.test_loader), (held.bank_loader, ref.bank_loader)):
        xa, ya = zip(*a)
        xb, yb = zip(*b)
        torch.testing.assert_close(torch.cat(xa), torch.cat(xb), atol=1e-6, rtol=0)
        assert torch.equal(torch.cat(ya), torch.cat(yb))
