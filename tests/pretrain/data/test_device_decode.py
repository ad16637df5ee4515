"""``data.decode_on: device`` (pretrain.data.device_decode) run with device = cpu: the batched crop
against torchvision's resized_crop, the whole path against the CPU path (CropViews) on JPEG
folders written by PIL, bad files inside a batch, the config key and its auto rule; the crops of
the same decoded pixels on both paths (on the CPU and, cuda-marked, on the GPU); cuda-marked,
nvjpeg's whole-image decode against libjpeg's two chroma upsamplings
(tests/helpers/jpeg_upsampling.py)."""

from __future__ import annotations

import io
import re
import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from scipy import stats
from torch.utils.data import default_collate
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from pretrain import build, config
from pretrain.config import ConfigError
from pretrain.data import augment_params as ap
from pretrain.data import datasets, imagefiles, pipeline, views
from pretrain.data import device_decode as dd
from pretrain.data import device_resize as dr
from pretrain.data.loaders import ResumableSampler, loader
from pretrain.engine import loop
from pretrain.testing.fakedata import write_imagenet100
from tests.helpers.state_dicts import flat

SPEC = views.ViewSpec(image_size=16, crop_scale=(0.2, 1.0), affine_degrees=0.0,
                      affine_translate=0.0, jitter_strength=0.4, jitter_prob=0.8,
                      grayscale_prob=0.2, blur_prob=0.5, hflip_prob=0.5)  # fmt: skip


def photo(h: int, w: int, seed: int) -> np.ndarray:
    """A smooth image with grain (JPEG-friendly, like a photo), HWC uint8."""
    rng = np.random.default_rng(seed)
    low = torch.from_numpy(rng.random((1, 3, 4, 5), dtype=np.float32))
    img = torch.nn.functional.interpolate(low, size=(h, w), mode="bicubic", align_corners=False)
    img = img[0] + torch.from_numpy(rng.normal(0, 0.05, (3, h, w)).astype(np.float32))
    return (img.clamp(0, 1) * 255).to(torch.uint8).permute(1, 2, 0).numpy()


def jpeg_bytes(hwc: np.ndarray, **kw) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(hwc).save(buf, "JPEG", quality=90, **kw)
    return buf.getvalue()


def corrupt_huffman(data: bytes) -> bytes:
    """Header and end marker intact, a Huffman table that libjpeg refuses."""
    b = bytearray(data)
    i = b.find(b"\xff\xc4")
    b[i + 5 : i + 21] = b"\xff" * 16
    return bytes(b)


# (name, height, width, kind): sizes around S = 16, one at S x S (stage 2 crops it)
FILES = [("a.jpg", 30, 40, "rgb"), ("b.jpg", 50, 37, "rgb"), ("c.jpg", 16, 16, "rgb"),
         ("d.jpg", 25, 33, "gray"), ("e.png", 20, 28, "png"), ("f.jpg", 40, 30, "progressive"),
         ("g.jpg", 12, 15, "rgb"), ("h.jpg", 64, 48, "rgb")]  # fmt: skip


def write_folder(root, bad: dict[str, str] | None = None) -> None:
    """train/<class>/<file> (two classes); ``bad``: name -> truncated | huffman."""
    for i, (name, h, w, kind) in enumerate(FILES):
        path = root / "train" / ("x" if i % 2 else "y") / name
        path.parent.mkdir(parents=True, exist_ok=True)
        img = photo(h, w, i)
        if kind == "png":
            Image.fromarray(img).save(path)
            continue
        data = (jpeg_bytes(img[..., 0], progressive=False) if kind == "gray"
                else jpeg_bytes(img, progressive=kind == "progressive"))  # fmt: skip
        how = (bad or {}).get(name)
        if how == "truncated":
            data = data[: len(data) // 2]
        elif how == "huffman":
            data = corrupt_huffman(data)
        path.write_bytes(data)


def paths(root) -> list[str]:
    return [p for p, _ in datasets.build("imagefolder", str(root), "train").samples]


def both_paths(root, skip: bool, support: int = 0):
    """(the CPU path's CropViews, the device path's EncodedViews, the skip counter)."""
    counter = imagefiles.skip_counter() if skip else None
    base = datasets.build("imagefolder", str(root), "train", skip_bad=counter)
    cpu = views.CropViews(base, SPEC, seed=7, support_views=support)
    return cpu, dd.EncodedViews(cpu, dd.file_samples(base)), counter


def device_batch(enc: dd.EncodedViews, keys) -> tuple[torch.Tensor, ...]:
    batch = dd.Collate(enc)([enc[k] for k in keys])
    return dd.DeviceCrops(enc, "cpu")(batch)


def assert_same_batch(ours, ref) -> None:
    """Labels, indices and parameter rows equal; crops equal on > 99 % of pixels, never more
    than one level apart (in practice equal: the same libjpeg decode and aten's weights)."""
    assert len(ours) == len(ref)
    for i in (2, 3, 4):
        assert torch.equal(ours[i], ref[i])
    for i in [0, 1, *range(5, len(ours))]:
        d = (ours[i].int() - ref[i].int()).abs()
        assert d.max() <= 1 and (d == 0).float().mean() > 0.99


# ---- the crop -----------------------------------------------------------------------------


def random_boxes(rng, h: int, w: int, k: int) -> list[tuple[int, int, int, int]]:
    return [ap.crop_box(rng, height=h, width=w, scale=(0.08, 1.0)) for _ in range(k)]


@pytest.mark.parametrize("size", [16, 37, 64])
def test_batched_crop_equals_torchvision_resized_crop(size):
    """Down- and upscales, odd sizes, boxes of RandomResizedCrop's law, and the whole image."""
    rng = np.random.default_rng(size)
    images, boxes = [], []
    for _ in range(10):
        h, w = rng.integers(8, 200, 2).tolist()
        images.append(torch.from_numpy(rng.integers(0, 256, (3, h, w), dtype=np.uint8)))
        boxes.append([*random_boxes(rng, h, w, 2), (0, 0, h, w)])
    boxes_t = torch.tensor(boxes)
    ours = dr.resize_crops(images, boxes_t, size)
    diff, total = [], 0
    for i, img in enumerate(images):
        for k, box in enumerate(boxes[i]):
            ref = TF.resized_crop(img, *box, [size, size], antialias=True)
            diff.append((ours[i, k].int() - ref.int()).abs().flatten())
            total += ref.numel()
    d = torch.cat(diff)
    assert d.max() <= 1 and (d == 0).sum() / total > 0.99
    # grouping never changes a crop: one image per chunk, or the images in another batch
    assert torch.equal(dr.resize_crops(images, boxes_t, size, budget=1), ours)
    assert torch.equal(dr.resize_crops(images[3:7], boxes_t[3:7], size), ours[3:7])


def test_imagenet_sized_crops_equal_torchvision_on_every_pixel():
    """500x375 -> 224 px, MoCo v2's scale: the downscales of an ImageNet run, bit-equal."""
    rng = np.random.default_rng(1)
    images = [torch.from_numpy(rng.integers(0, 256, (3, 375, 500), dtype=np.uint8))
              for _ in range(3)]  # fmt: skip
    boxes = [[*[ap.crop_box(rng, height=375, width=500, scale=(0.2, 1.0)) for _ in range(2)],
              (0, 0, 375, 500)] for _ in images]  # fmt: skip
    ours = dr.resize_crops(images, torch.tensor(boxes), 224)
    for i, img in enumerate(images):
        for k, box in enumerate(boxes[i]):
            assert torch.equal(ours[i, k], TF.resized_crop(img, *box, [224, 224], antialias=True))


def test_tf32_is_off_inside_the_crop_and_restored_after():
    """Integer weights up to 2**16 need float32's full mantissa (TF32 keeps 10 bits)."""
    matmul = torch.backends.cuda.matmul
    old = matmul.fp32_precision
    try:
        torch.set_float32_matmul_precision("high")  # a run that allows TF32 (legacy API)
        with dr.full_fp32():
            assert matmul.fp32_precision == "ieee"
        assert matmul.fp32_precision == "tf32"
    finally:  # the defaults again, for the tests that follow
        torch.set_float32_matmul_precision("highest")
        matmul.fp32_precision = old
    assert torch.get_float32_matmul_precision() == "highest"


def test_heavy_downscale_stays_within_one_level():
    """Above aten's 16-bit weights (10x smaller): still within a level of torchvision."""
    img = torch.from_numpy(np.random.default_rng(1).integers(0, 256, (3, 300, 320),
                                                              dtype=np.uint8))  # fmt: skip
    ours = dr.resize_crops([img], torch.tensor([[[0, 0, 300, 320], [5, 7, 250, 200]]]), 24)
    for k, box in enumerate([(0, 0, 300, 320), (5, 7, 250, 200)]):
        ref = TF.resized_crop(img, *box, [24, 24], antialias=True)
        d = (ours[0, k].int() - ref.int()).abs()
        assert d.max() <= 1 and (d == 0).float().mean() > 0.99


def test_jpeg_size_reads_the_frame_header_and_names_what_the_device_cannot_read():
    img = photo(30, 40, 0)
    assert dd.jpeg_size(jpeg_bytes(img)) == (30, 40)
    assert dd.jpeg_size(jpeg_bytes(img, progressive=True)) == (30, 40)
    assert dd.jpeg_size(jpeg_bytes(img[..., 0])) == (30, 40)
    exif = Image.Exif()
    exif[0x010E] = "described"  # an APP1 segment before the frame header
    assert dd.jpeg_size(jpeg_bytes(img, exif=exif.tobytes())) == (30, 40)
    cmyk = io.BytesIO()
    Image.fromarray(img).convert("CMYK").save(cmyk, "JPEG")
    png = io.BytesIO()
    Image.fromarray(img).save(png, "PNG")
    good = jpeg_bytes(img)
    assert dd.jpeg_size(cmyk.getvalue()) == "JPEG with 4 colour components"
    assert dd.jpeg_size(png.getvalue()) == "not a JPEG file"
    assert dd.jpeg_size(good[: len(good) // 2]) == "truncated JPEG (no end-of-image marker)"
    assert dd.jpeg_size(good[:40]) == "broken JPEG header"
    assert dd.jpeg_size(corrupt_huffman(good)) == (30, 40)  # left to the decoder


def test_file_samples_follow_class_subsets_and_skip_wrappers(tmp_path):
    """The worker reads the file of each index of the training set as built (ImageNet-100's
    class folders, data.in_classes, data.subset, data.skip_bad_images)."""
    write_imagenet100(tmp_path, per_class=2, size=8)
    base = datasets.build("imagenet100", str(tmp_path), "train", skip_bad=imagefiles.skip_counter())
    sub = datasets.stratified_subset(datasets.ClassSubset(base, [3, 5, 7]), 1, seed=0)
    files = dd.file_samples(sub)
    assert files is not None and len(files) == len(sub) == 3
    for i, (path, label) in enumerate(files):
        image, y = sub[i]
        assert y == label and torch.equal(imagefiles.read_image(path), torch.as_tensor(image))
    assert dd.file_samples(datasets.Digits()) is None


# ---- the path against the CPU path --------------------------------------------------------


@pytest.mark.parametrize("support", [0, 2])
def test_device_path_equals_the_cpu_path_on_a_jpeg_folder(tmp_path, support, capsys):
    """RGB, grayscale, progressive, an S x S image (cropped in stage 2 on both paths) and a PNG
    (decoded in the worker, named once): the same rows, labels and crops as CropViews."""
    write_folder(tmp_path)
    cpu, enc, _ = both_paths(tmp_path, skip=False, support=support)
    keys = [(3, i) for i in range(len(FILES))]
    ours = device_batch(enc, keys)
    assert_same_batch(ours, default_collate([cpu[k] for k in keys]))
    assert ours[0].device.type == "cpu" and ours[0].dtype == torch.uint8
    out = capsys.readouterr().out
    assert out.count("e.png: decoded on the CPU (not a JPEG file)") == 1


def test_through_loader_workers_and_a_resume_replays_the_same_batches(tmp_path):
    """Two loader workers and the resumable sampler: the epoch's batches equal the CPU path's,
    and starting at step 1 gives the tail again."""
    write_folder(tmp_path)
    cpu, enc, _ = both_paths(tmp_path, skip=False)
    sampler = ResumableSampler(len(enc), 4, seed=7)
    sampler.set_epoch(2)
    crops = dd.DeviceCrops(enc, "cpu")
    ours = list(dd.DecodedLoader(loader(enc, 4, sampler, 2, collate_fn=dd.Collate(enc)), crops))
    ref = list(loader(cpu, 4, sampler, 0))
    assert len(ours) == 2
    for a, b in zip(ours, ref, strict=True):
        assert_same_batch(a, b)
    sampler.set_epoch(2, start_step=1)
    (tail,) = list(dd.DecodedLoader(loader(enc, 4, sampler, 0, collate_fn=dd.Collate(enc)), crops))
    for a, b in zip(tail, ours[1], strict=True):
        assert torch.equal(a, b)


def test_the_training_process_side_makes_no_host_sync(tmp_path):
    """Decode, crops and the batch's assembly: no op that would make the host wait for a GPU
    (negmine_core/contract/sync_counter.py), with a PNG crop from the worker in the batch."""
    from negmine_core.contract.sync_counter import SyncCounter

    write_folder(tmp_path)
    _, enc, _ = both_paths(tmp_path, skip=False)
    batch = dd.Collate(enc)([enc[(0, i)] for i in range(len(FILES))])
    crops = dd.DeviceCrops(enc, "cpu")
    assert len(batch.crop_where) == 1  # the PNG
    with SyncCounter() as syncs:
        crops(batch)
    # the one tensor built from host data: resize_crops' group index (from the decoded images'
    # sizes), uploaded pinned and non-blocking (device_resize.upload): no wait on a GPU
    rest = [s for s in syncs.syncs if not (s.kind == "host_data" and "resize_crops" in s.where())]
    assert not rest, syncs.report()


def test_one_process_equals_two_ranks(tmp_path):
    """A global batch decoded whole equals its two halves decoded apart (each rank's share)."""
    write_folder(tmp_path)
    _, enc, _ = both_paths(tmp_path, skip=False)
    keys = [(0, i) for i in range(len(FILES))]
    whole = device_batch(enc, keys)
    halves = [device_batch(enc, keys[:4]), device_batch(enc, keys[4:])]
    for i, t in enumerate(whole):
        assert torch.equal(t, torch.cat([h[i] for h in halves]))


def test_crop_boxes_of_the_device_path_follow_random_resized_crop(tmp_path):
    """The boxes the workers draw from a JPEG's header, over many samples, against
    RandomResizedCrop.get_params (the KS tests of test_augment, on this path's draws)."""
    n = 3000
    path = tmp_path / "x.jpg"
    path.write_bytes(jpeg_bytes(photo(75, 100, 0)))

    class Many(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return n

    enc = dd.EncodedViews(views.CropViews(Many(), SPEC, seed=1), [(str(path), 0)] * n)
    ours = torch.cat([enc[(0, i)][4] for i in range(n)]).numpy()
    torch.manual_seed(3)
    img = torch.empty(3, 75, 100)
    ref = np.array([v2.RandomResizedCrop.get_params(img, [0.2, 1.0], [3 / 4, 4 / 3])
                    for _ in range(n)])  # fmt: skip
    area = lambda b: b[:, 2] * b[:, 3]  # noqa: E731
    log_ratio = lambda b: np.log(b[:, 3] / b[:, 2])  # noqa: E731
    for f in (area, log_ratio, lambda b: b[:, 0], lambda b: b[:, 1]):
        assert stats.ks_2samp(f(ours), f(ref)).pvalue > 1e-3


# ---- bad files ----------------------------------------------------------------------------


BAD = {"b.jpg": "truncated", "g.jpg": "huffman", "h.jpg": "huffman"}


def test_bad_jpegs_inside_a_batch_are_skipped_counted_and_named_as_on_the_cpu(tmp_path, capsys):
    """A truncated file (caught by the header check in the worker) and two with a broken
    Huffman table (they fail the batched decode; the culprits are found file by file): the
    substitutes, labels, rows and skip counts of the CPU path with data.skip_bad_images."""
    write_folder(tmp_path, BAD)
    keys = [(1, i) for i in range(len(FILES))]
    cpu, _, cpu_count = both_paths(tmp_path, skip=True)
    ref = default_collate([cpu[k] for k in keys])
    _, enc, count = both_paths(tmp_path, skip=True)
    assert_same_batch(device_batch(enc, keys), ref)
    # x/ holds b d f h (0-3), y/ a c e g (4-7): b, h, then g and b again (g wraps to 0)
    assert int(count.sum()) == int(cpu_count.sum()) == 4
    out = capsys.readouterr().out
    for name in BAD:
        assert len(re.findall(rf"{name}: skipped, unreadable \(cannot read image ", out)) == 1


@pytest.mark.parametrize("name", ["b.jpg", "g.jpg"])
def test_without_skip_a_bad_jpeg_in_a_batch_raises_naming_the_file(tmp_path, name):
    write_folder(tmp_path, {name: BAD[name]})
    _, enc, _ = both_paths(tmp_path, skip=False)
    with pytest.raises(imagefiles.BadImageError, match=re.escape(name)):
        device_batch(enc, [(0, i) for i in range(len(FILES))])


# ---- config and the trainer ---------------------------------------------------------------


def cfg_with(*over: str) -> config.Config:
    """digits_moco.yaml without its RandomAffine (the device crop has none), then ``over``."""
    return config.load("digits_moco.yaml", ["data.affine_degrees=0", "data.affine_translate=0",
                                            *over])  # fmt: skip


def test_auto_picks_the_workers_everywhere_the_device_decode_is_opt_in():
    """auto = cpu on CUDA too: the latest GPU run (H200 2026-11-28) measured the workers' decode
    faster (112.8 against 127.7 ms per step); an explicit device stays device."""
    files = cfg_with("data.name=imagefolder").data
    assert pipeline.decode_on(files, "cuda:0") == "cpu"
    assert pipeline.decode_on(files, "cpu") == "cpu"
    assert pipeline.decode_on(cfg_with("data.name=cifar10").data, "cuda") == "cpu"
    assert pipeline.decode_on(cfg_with("data.name=imagenet100").data, "cuda") == "cpu"
    explicit = cfg_with("data.name=imagefolder", "data.decode_on=device").data
    assert pipeline.decode_on(explicit, "cuda") == "device"
    assert pipeline.decode_on(cfg_with("data.name=imagefolder", "data.augment_on=workers").data,
                           "cuda") == "cpu"  # fmt: skip
    affine = cfg_with("data.name=imagefolder", "data.affine_degrees=10").data
    assert pipeline.decode_on(affine, "cuda") == "cpu"
    assert pipeline.decode_on(cfg_with("data.name=imagefolder", "data.decode_on=cpu").data,
                           "cuda") == "cpu"  # fmt: skip
    assert config.DataConfig().decode_on == "auto"


@pytest.mark.parametrize(
    "over",
    [["data.name=cifar10"], ["data.name=imagefolder", "data.augment_on=workers"],
     ["data.name=imagefolder", "data.affine_translate=0.1"]],
)  # fmt: skip
def test_decode_on_device_is_refused_where_it_cannot_apply(over):
    with pytest.raises(ConfigError, match="data.decode_on"):
        cfg_with(*over, "data.decode_on=device")
    with pytest.raises(ConfigError, match="data.decode_on"):
        cfg_with("data.decode_on=gpu")


def test_num_workers_default_takes_the_ranks_cores_but_one(monkeypatch):
    """-1 (the default): a 16-core node with one GPU gets 15 workers, with 8 GPUs 1 each."""
    from pretrain.runtime import cores

    assert config.DataConfig().num_workers == -1
    monkeypatch.setattr(cores, "available", lambda: 16)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert cores.loader_workers(-1) == 15 and cores.loader_workers(8) == 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert cores.loader_workers(-1) == 1
    monkeypatch.setattr(cores, "available", lambda: 1)
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert cores.loader_workers(-1) == 0
    monkeypatch.setattr(cores, "available", lambda: 16)
    cfg = config.load("digits_moco.yaml", ["data.num_workers=-1"])
    with warnings.catch_warnings():  # torch warns of 15 workers on this 2-core machine
        warnings.simplefilter("ignore")
        assert build.datasets_for(cfg).num_workers == 15
    with pytest.raises(ConfigError, match="data.num_workers"):
        config.load("digits_moco.yaml", ["data.num_workers=-2"])


TRAIN = ["data.name=imagefolder", "data.image_size=16", "data.eval_resize=16", "model.width=8",
         "model.bn_splits=2", "train.batch_size=4", "moco.queue_size=4", "data.test_split=train",
         "train.deterministic=true", "train.log_every=1", "eval.knn_every=0", "train.epochs=1",
         "train.max_steps=2", "data.num_workers=1"]  # fmt: skip


def test_the_trainer_with_decode_on_device_matches_decode_on_cpu(tmp_path, capsys):
    """Two steps of the trainer on a JPEG folder (one loader worker): the same losses with the
    crops made in the training process as with the crops made in the worker."""
    write_folder(tmp_path / "data")
    losses = {}
    for where in ("cpu", "device"):
        cfg = cfg_with(*TRAIN, f"data.root={tmp_path / 'data'}", f"out_dir={tmp_path / where}",
                       f"data.decode_on={where}")  # fmt: skip
        assert loop.main(cfg) == 0
        rows = (tmp_path / where / "metrics.jsonl").read_text().splitlines()
        losses[where] = [r for r in rows if '"kind": "step"' in r]
    assert len(losses["cpu"]) == 2
    loss = lambda r: float(re.search(r'"loss": ([-0-9.e]+)', r).group(1))  # noqa: E731
    assert [loss(r) for r in losses["device"]] == pytest.approx(
        [loss(r) for r in losses["cpu"]], abs=1e-6
    )
    assert "training images decoded and cropped on cpu" in capsys.readouterr().out


def tensors(path) -> dict[str, torch.Tensor]:
    return flat(torch.load(path, weights_only=True))


def test_a_resumed_device_decode_run_equals_an_uninterrupted_one(tmp_path):
    """Two epochs in one go, and cut after step 3 then resumed: the same weights, queue and
    optimizer state (the crops of the resumed steps are the uninterrupted run's)."""
    write_folder(tmp_path / "data")

    def run(out: str, *extra: str) -> int:
        cfg = cfg_with(*TRAIN, f"data.root={tmp_path / 'data'}", f"out_dir={tmp_path / out}",
                       "data.decode_on=device", "train.epochs=2", *extra)  # fmt: skip
        return loop.main(cfg)

    assert run("full", "train.max_steps=0") == 0
    assert run("cut", "train.max_steps=3") == 0 and run("cut", "train.max_steps=0") == 0
    a, b = (
        tensors(tmp_path / "full/checkpoints/last.pt"),
        tensors(tmp_path / "cut/checkpoints/last.pt"),
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_trainer_names_or_skips_a_corrupt_jpeg_on_the_device_path(tmp_path, capsys):
    """A JPEG that fails the batched decode: exit 1 naming it, or skipped and counted."""
    write_folder(tmp_path / "data", {"g.jpg": "huffman"})

    def run(out: str, *extra: str) -> int:
        cfg = cfg_with(*TRAIN, f"data.root={tmp_path / 'data'}", f"out_dir={tmp_path / out}",
                       "data.decode_on=device", "train.max_steps=0", *extra)  # fmt: skip
        return loop.main(cfg)

    assert run("named") == 1
    err = capsys.readouterr().err
    assert re.search(r"cannot read image \S+g\.jpg", err) and "data.skip_bad_images" in err
    assert run("skip", "data.skip_bad_images=true") == 0
    rows = (tmp_path / "skip" / "metrics.jsonl").read_text()
    assert '"skipped_images": 1' in rows
    assert "g.jpg: skipped, unreadable" in capsys.readouterr().out


# ---- the decode and the crops on the GPU, apart ------------------------------------------
#
# The crop path is exact: the same decoded pixels give the same crops on any device (integer sums
# below 2**24 in float32), within aten's rule of TF.resized_crop as on the CPU. The decode is not:
# nvjpeg replicates the chroma samples over their 2 x 2 pixels where libjpeg-turbo (the CPU path)
# interpolates them ("fancy upsampling"). On these small grainy 4:2:0 images that alone moves RGB
# by 3.96-12.16 levels on average (b.jpg 5.44, the mean an H200 measured against
# nvjpeg); DALI's own CPU-vs-GPU decode test allows 4 (1 with its fancy-upsampling option) on
# natural photos, torchvision's < 2. So each side is checked on its own: the crops exactly, the
# decode against libjpeg's two upsamplings of the same file.


def jpeg_files(root) -> list[tuple[str, bytes]]:
    """(name, bytes) of the folder's JPEGs (the PNG left out)."""
    return [(p.rsplit("/", 1)[-1], open(p, "rb").read()) for p in paths(root) if p.endswith(".jpg")]


def test_the_replicated_chroma_reference_is_libjpegs_decode_without_fancy_upsampling(tmp_path):
    """tests/helpers/jpeg_upsampling.py, checked here: the half-scale chroma planes are the file's
    own samples (libjpeg's fancy filter of them is the full-scale decode's chroma, exactly), the
    colour conversion is libjpeg's (within a level of torchvision's decode), and on these images the
    two upsamplings differ by more than any IDCT (the gap the GPU test allows)."""
    from tests.helpers import jpeg_upsampling as ju

    write_folder(tmp_path)
    for name, data in jpeg_files(tmp_path):
        cpu = torchvision_decode(data)
        if name == "d.jpg":  # grayscale: no chroma, one decode
            with pytest.raises(ValueError, match="4:2:0 colour"):
                ju.decode_replicated(data)
            continue
        full, half = ju.ycbcr_planes(data)
        h, w = full.shape[:2]
        for c in (1, 2):
            assert np.array_equal(ju.fancy_h2v2(half[..., c], h, w), full[..., c]), name
        assert np.abs(ju.to_rgb(full).astype(int) - cpu.astype(int)).max() <= 1, name
        gap = np.abs(ju.decode_replicated(data).astype(int) - cpu.astype(int)).mean()
        assert gap > 3.0, (name, gap)  # every colour file exercises the upsampling


def torchvision_decode(data: bytes, device: str = "cpu") -> np.ndarray:
    """torchvision's decode_jpeg (libjpeg-turbo on the CPU, nvjpeg on CUDA), (3, H, W) uint8."""
    import torchvision

    t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    rgb = torchvision.io.ImageReadMode.RGB
    return torchvision.io.decode_jpeg(t, mode=rgb, device=device).cpu().numpy()


@pytest.mark.cuda
def test_nvjpeg_decodes_whole_images_as_libjpeg_up_to_chroma_upsampling(tmp_path):
    """Whole images, one batched nvjpeg call (as DeviceCrops.decode makes it), against libjpeg's
    decode of the same file. Bounds, per file: the mean |RGB difference| at most the gap between
    libjpeg's two upsamplings of that file (what replicating chroma instead of interpolating it
    explains; 0 for the grayscale file) plus 1 level (the IDCTs: DALI's bound when both sides
    upsample alike); the luma, which the upsampling barely moves (0.24-0.29 levels here), within
    its own gap plus the same 1 level. A shifted, swapped or wrongly converted image fails both."""
    import torchvision

    from tests.helpers import jpeg_upsampling as ju

    write_folder(tmp_path)
    files = jpeg_files(tmp_path)
    rgb = torchvision.io.ImageReadMode.RGB
    batch = [torch.frombuffer(bytearray(data), dtype=torch.uint8) for _, data in files]
    gpu = [g.cpu().numpy() for g in torchvision.io.decode_jpeg(batch, mode=rgb, device="cuda")]
    for (name, data), g in zip(files, gpu, strict=True):
        cpu = torchvision_decode(data)
        assert g.shape == cpu.shape, name
        other = cpu if name == "d.jpg" else ju.decode_replicated(data)  # libjpeg's other mode
        gap = np.abs(other.astype(int) - cpu.astype(int)).mean()
        d = np.abs(g.astype(int) - cpu.astype(int)).mean()
        to_other = np.abs(g.astype(int) - other.astype(int)).mean()
        why = f"{name}: mean |nvjpeg - libjpeg| {d:.2f}, to the replicated decode {to_other:.2f}"
        assert d <= gap + 1.0, f"{why}, upsampling gap {gap:.2f}"
        luma_gap = np.abs(ju.luma(other) - ju.luma(cpu)).mean()
        luma_d = np.abs(ju.luma(g) - ju.luma(cpu)).mean()
        assert luma_d <= luma_gap + 1.0, f"{why}; luma {luma_d:.2f}, its gap {luma_gap:.2f}"


class CpuDecoded(dd.DeviceCrops):
    """The device path with its decode replaced by libjpeg's on the CPU, moved to the device: the
    crops (and the batch's assembly) alone, from the CPU path's own pixels."""

    def decode(self, batch: dd.EncodedBatch) -> list[torch.Tensor | None]:
        files = batch.encoded.split(batch.lengths)
        return [torch.from_numpy(torchvision_decode(f.numpy().tobytes())).to(self.device)
                for f in files]  # fmt: skip


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_device_crops_of_the_same_pixels_equal_the_cpu_path(tmp_path, device):
    """The same decoded pixels through both crop paths: the device path's batched crops (here on
    ``device``) against CropViews' TF.resized_crop, by assert_same_batch's rule (aten's uint8
    kernel: equal but where its weights keep more than 16 bits); and on every device bit-equal to
    the same crops made on the CPU (integer sums below 2**24, exact in float32 without TF32)."""
    write_folder(tmp_path)
    cpu, enc, _ = both_paths(tmp_path, skip=False, support=2)
    keys = [(1, i) for i in range(len(FILES))]
    batch = dd.Collate(enc)([enc[k] for k in keys])
    ours = CpuDecoded(enc, device)(batch)
    assert all(t.device.type == device for t in (ours[0], ours[1], ours[5]))
    ours = tuple(t.cpu() for t in ours)
    assert_same_batch(ours, default_collate([cpu[k] for k in keys]))
    for a, b in zip(ours, CpuDecoded(enc, "cpu")(batch), strict=True):
        assert torch.equal(a, b)
