"""Input pipeline: CPU time per image and images/s, per-sample path vs two-stage path.

    python benchmarks/input.py [--quick] [--device cpu|cuda] [--cifar data/cifar10-jpg]
                               [--parts pipeline trainer decode] [--reencode FOLDER]
                               [--results benchmarks/RESULTS.md] [--no-record]

Part 1, the pipeline alone, one process and one thread (what one loader worker does), the two
paths interleaved round by round on the same files:
- old (``data.augment_on: workers``): PIL decode + the per-sample torchvision v2 chain, two views;
- new (``device``): ``torchvision.io.decode_image`` + stage 1 (crops, parameter rows) + stage 2
  (photometric ops, batched on ``--device``; its CPU time is counted, and on CUDA its device time
  is reported beside it);
- new with stage 2 compiled (``data.augment_compile: true``), compiled before the timing (not in
  ``--quick``, to keep CI short).
At 32 px on the CIFAR-10 JPEGs (``--cifar``; skipped with a message if missing) with the
cifar10_moco.yaml augmentation, and at 96 and 224 px on ImageNet-sized JPEGs (500x375, quality 90)
generated into a temporary folder, with the MoCo v2 ImageNet augmentation (stl10_moco.yaml at 96,
the defaults at 224). At 224 px it also splits the time into decode, crop and photometric ops.

Part 2, the trainer end to end (loader with the config's workers + train step) against a
model-only step (the same ``loop.train_step`` on one pre-made batch), on digits_moco.yaml and on
cifar10_moco.yaml read from the JPEG folder (without one: synthetic 32 px JPEGs in its layout),
each with the two augment_on paths through the loader and with ``data.resident: device`` (no
loader: the split on the device, batches and augmentation there). On a CPU the CIFAR-10 model
is shrunk (``--cifar-overrides``); on CUDA it is the recipe as shipped. On CUDA (or with
``--imagenet-trainer``) also imagenet100_moco.yaml on 500x375 JPEGs (synthetic or ``--reencode``)
with ``data.decode_on`` cpu and device: the ratio trainer / model-only is the input pipeline's
cost (on a CPU a small model, CPU_IN100). ``--trainers`` picks some of these recipes (the GPU
suite, to fit its budget: cifar10_moco alone).

Part 3 (``decode``), decode + RandomResizedCrop of both views at 224 px, per image, on
ImageNet-sized JPEGs (500x375, quality 90: synthetic, or the images of ``--reencode FOLDER``
re-encoded so by PIL): the CPU path (``data.decode_on: cpu``, what one loader worker does, one
thread) against the device path (``data.decode_on: device``): the worker's share (read the bytes,
parse the header, draw the parameters; CPU time) and the training process's batched decode + crop
on ``--device`` (wall time with the device synchronised, and its host CPU time).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from negmine_core.step import Batch  # noqa: E402
from pretrain import config  # noqa: E402
from pretrain.data import device_decode, imagefiles, loaders, pipeline, views  # noqa: E402
from pretrain.engine import loop  # noqa: E402

# imagenet100_moco.yaml on a CPU (part 2 with --imagenet-trainer): a small model, small batches
CPU_IN100 = ["model.arch=resnet_small", "model.width=16", "train.batch_size=32",
             "model.bn_splits=1", "moco.queue_size=256"]  # fmt: skip
CPU_CIFAR = ["model.arch=resnet_small", "model.width=32", "train.batch_size=128",
             "model.bn_splits=1", "train.base_lr=0.03"]  # fmt: skip


def machine(device: torch.device) -> str:
    cpu = "unknown CPU"
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    dev = torch.cuda.get_device_name(device) if device.type == "cuda" else "no GPU used"
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, {dev}, "
            f"python {platform.python_version()}; uptime: {load}")  # fmt: skip


# ---- files ----------------------------------------------------------------------------------


def cifar_files(root: Path, n: int) -> list[Path]:
    files = sorted((root / "train").glob("*/*.jpg"))
    if not files:
        raise FileNotFoundError(f"no train/<class>/*.jpg under {root}")
    step = max(1, len(files) // n)
    return files[::step][:n]


def imagenet_like_jpegs(folder: Path, n: int, seed: int = 0) -> list[Path]:
    """``n`` 500x375 JPEGs at quality 90 with photo-like content (smooth shapes + grain)."""
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        low = torch.from_numpy(rng.random((1, 3, 12, 16), dtype=np.float32))
        img = torch.nn.functional.interpolate(low, size=(375, 500), mode="bicubic")[0]
        img = img + torch.from_numpy(rng.normal(0, 0.04, (3, 375, 500)).astype(np.float32))
        arr = (img.clamp(0, 1) * 255).to(torch.uint8).permute(1, 2, 0).numpy()
        path = folder / f"{i:04d}.jpg"
        Image.fromarray(arr).save(path, quality=90)
        paths.append(path)
    return paths


def reencoded_jpegs(source: Path, folder: Path, n: int) -> list[Path]:
    """``n`` images of ``source`` (any format PIL reads, searched recursively, sorted) resized to
    500x375 and saved at quality 90: full-size ImageNet-like JPEGs from, say, Imagenette."""
    found = sorted(p for p in source.rglob("*") if imagefiles.is_image(p.name))
    if not found:
        raise FileNotFoundError(f"no images under {source}")
    paths = []
    for i in range(n):
        with Image.open(found[i % len(found)]) as img:
            big = img.convert("RGB").resize((500, 375), Image.Resampling.BICUBIC)
        path = folder / f"re{i:04d}.jpg"
        big.save(path, quality=90)
        paths.append(path)
    return paths


def pil_loader(path: Path) -> Image.Image:
    """torchvision ImageFolder's default loader."""
    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


class Files(torch.utils.data.Dataset):
    def __init__(self, files: list[Path], loader) -> None:
        self.files, self.loader = files, loader

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        return self.loader(self.files[i]), 0


# ---- part 1: the pipeline alone --------------------------------------------------------------


def cpu_clock() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


def since(start: tuple[float, float]) -> tuple[float, float]:
    cpu, wall = cpu_clock()
    return cpu - start[0], wall - start[1]


def old_path(files: list[Path], d: config.DataConfig) -> dict[str, float]:
    ds = loaders.TwoViews(Files(files, pil_loader), pipeline.train_transform(d), seed=0)
    t0 = cpu_clock()
    for f in files:
        pil_loader(f)
    decode = since(t0)
    t0 = cpu_clock()
    for i in range(len(files)):
        ds[(0, i)]
    total = since(t0)
    return {"cpu": total[0], "wall": total[1], "decode": decode[0], "rest": total[0] - decode[0]}


def new_path(
    files: list[Path], d: config.DataConfig, device: torch.device, batch: int, stage2
) -> dict[str, float]:
    ds = views.CropViews(Files(files, views.read_image), pipeline.view_spec(d), seed=0)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    t0 = cpu_clock()
    for f in files:
        views.read_image(f)
    decode = since(t0)
    t0 = cpu_clock()
    items = [ds[(0, i)] for i in range(len(files))]
    stage1 = since(t0)
    s2_cpu = s2_wall = 0.0
    for lo in range(0, len(items), batch):
        chunk = items[lo : lo + batch]
        x = torch.cat([torch.stack([it[0] for it in chunk]), torch.stack([it[1] for it in chunk])])
        p = torch.cat(
            [torch.stack([it[4][0] for it in chunk]), torch.stack([it[4][1] for it in chunk])]
        )
        x, p = x.to(device, non_blocking=True), p.to(device, non_blocking=True)
        sync()
        t0 = cpu_clock()
        stage2(x, p)
        cpu = since(t0)[0]  # launch cost on CUDA; the whole work on a CPU
        sync()
        s2_cpu, s2_wall = s2_cpu + cpu, s2_wall + since(t0)[1]
    return {"cpu": stage1[0] + s2_cpu, "wall": stage1[1] + s2_wall, "decode": decode[0],
            "crop": stage1[0] - decode[0], "photometric": s2_cpu, "device_s": s2_wall}  # fmt: skip


def pipeline_rows(
    name: str,
    files: list[Path],
    d: config.DataConfig,
    device,
    rounds: int,
    batch: int,
    compile_stage2: bool = True,
) -> tuple[list[str], dict[str, float], dict[str, float]]:
    old: list[dict] = []
    new: list[dict] = []
    fused: list[dict] = []
    eager = pipeline.photometric(d).to(device)
    compiled = pipeline.photometric(dataclasses.replace(d, augment_compile=True)).to(device)
    if compile_stage2:
        new_path(files[: 2 * batch], d, device, batch, compiled)  # compile outside the timing
    for _ in range(rounds):  # interleaved
        old.append(old_path(files, d))
        new.append(new_path(files, d, device, batch, eager))
        if compile_stage2:
            fused.append(new_path(files, d, device, batch, compiled))
    n = len(files)
    med = lambda runs, k: statistics.median(r[k] for r in runs)  # noqa: E731
    o_ms = 1e3 * med(old, "cpu") / n
    rows = [f"| {name} | old (workers) | {o_ms:.3f} | {n / med(old, 'wall'):.0f} | 1.00x |"]
    for label, runs in (("new (device)", new), ("new, stage 2 compiled", fused))[: 1 + bool(fused)]:
        n_ms = 1e3 * med(runs, "cpu") / n
        on_gpu = device.type == "cuda"
        dev = f" (device {1e3 * med(runs, 'device_s') / n:.3f} ms/img)" if on_gpu else ""
        rows.append(f"| {name} | {label}{dev} | {n_ms:.3f} | {n / med(runs, 'wall'):.0f} | "
                    f"{o_ms / n_ms:.2f}x |")  # fmt: skip
    per = lambda runs, k: 1e3 * med(runs, k) / n  # noqa: E731
    return (
        rows,
        {k: per(old, k) for k in ("decode", "rest")},
        {k: per(new, k) for k in ("decode", "crop", "photometric")},
        {k: per(fused or new, k) for k in ("decode", "crop", "photometric")},
    )


# ---- part 3: decode + crop, CPU path vs device path -------------------------------------------


def decode_crop(files: list[Path], device: torch.device, rounds: int, batch: int) -> dict:
    """Per-image times (ms) of decode + RandomResizedCrop (both views, 224 px, MoCo v2 scale)."""
    d = config.DataConfig()
    base = imagefiles.ImageFiles([(str(f), 0) for f in files], ["0"])
    cpu = views.CropViews(base, pipeline.view_spec(d), seed=0)
    enc = device_decode.EncodedViews(cpu, base.samples)
    crops, collate = device_decode.DeviceCrops(enc, device), device_decode.Collate(enc)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    n = len(files)
    crops(collate([enc[(0, i)] for i in range(min(n, batch))]))  # warm-up (CUDA, nvjpeg)
    runs: list[dict[str, float]] = []
    for r in range(rounds):  # interleaved
        t0 = cpu_clock()
        for i in range(n):
            cpu[(r, i)]
        cpu_path = since(t0)[0]
        t0 = cpu_clock()
        items = [enc[(r, i)] for i in range(n)]
        worker = since(t0)[0]
        batches = [collate(items[lo : lo + batch]) for lo in range(0, n, batch)]
        sync()
        t0 = cpu_clock()
        for b in batches:
            crops(b)
        sync()
        main_cpu, main_wall = since(t0)
        t0 = cpu_clock()
        for b in batches:
            crops.decode(b)
        sync()
        dec = since(t0)[1]
        runs.append({"cpu_path": cpu_path, "worker": worker, "main_cpu": main_cpu,
                     "main_wall": main_wall, "decode_wall": dec})  # fmt: skip
    return {k: 1e3 * statistics.median(r[k] for r in runs) / n for k in runs[0]}


def decode_rows(name: str, t: dict[str, float], device: torch.device) -> list[str]:
    crop = t["main_wall"] - t["decode_wall"]
    return [
        f"| {name} | cpu: loader worker | {t['cpu_path']:.3f} | - | {1e3 / t['cpu_path']:.0f} |",
        f"| {name} | device ({device}): loader worker | {t['worker']:.3f} | - | "
        f"{1e3 / t['worker']:.0f} |",
        f"| {name} | device ({device}): training process | {t['main_cpu']:.3f} | "
        f"{t['main_wall']:.3f} (decode {t['decode_wall']:.3f} + crop {crop:.3f}) | "
        f"{1e3 / t['main_wall']:.0f} |",
    ]


# ---- part 2: the trainer end to end ----------------------------------------------------------


def trainer_vs_model(cfg: config.Config, steps: int) -> tuple[float, float]:
    """(trainer ms per step, model-only ms per step), medians of two interleaved blocks."""
    run = loop.setup(cfg)
    run.moco.train()
    sync = torch.cuda.synchronize if run.device.type == "cuda" else (lambda: None)
    run.data.sampler.set_epoch(0, 0)
    state = {"epoch": 0, "it": iter(run.data.train_loader)}

    def batch_to_device() -> list[torch.Tensor]:
        try:
            x1, x2, y, _, *rows = next(state["it"])
        except StopIteration:  # the next epoch (digits has 22 steps)
            state["epoch"] += 1
            run.data.sampler.set_epoch(state["epoch"], 0)
            state["it"] = iter(run.data.train_loader)
            x1, x2, y, _, *rows = next(state["it"])
        return [t.to(run.device, non_blocking=True) for t in (x1, x2, y, *rows)]

    x1, x2, y, *rows = batch_to_device()
    if rows:  # the model-only step gets normalised float views, made once
        x = run.data.augment(torch.cat([x1, x2]), torch.cat([rows[0][:, 0], rows[0][:, 1]]))
        x1, x2 = x.chunk(2)
    fixed = (x1, x2, y)
    loop.train_step(run, Batch.make(*fixed), 1.0)  # warm-up of both
    b = batch_to_device()
    loop.train_step(run, Batch.make(b[0], b[1], b[2], b[3:]), 1.0)
    trainer, model = [], []
    for _ in range(2):
        sync()
        tic = time.perf_counter()
        for _ in range(steps):
            b = batch_to_device()
            loop.train_step(run, Batch.make(b[0], b[1], b[2], b[3:]), 1.0)
        sync()
        trainer.append((time.perf_counter() - tic) / steps)
        tic = time.perf_counter()
        for _ in range(steps):
            loop.train_step(run, Batch.make(*fixed), 1.0)
        sync()
        model.append((time.perf_counter() - tic) / steps)
    return 1e3 * min(trainer), 1e3 * min(model)


TRAINERS = ("digits_moco", "cifar10_moco", "imagenet100_moco")  # part 2's recipes (--trainers)
SYNTHETIC_CIFAR = 5120  # synthetic CIFAR-10 stand-in: images (the recipe's queue is 4,096)


def synthetic_cifar(root: Path, n: int, seed: int = 0, held_out: str = "val",
                    held_out_share: int = 10) -> Path:  # fmt: skip
    """``root/{train,HELD_OUT}/c<k>/*.jpg``: ``n`` random 32x32 JPEGs (quality 95) in 10 classes
    and 1/``held_out_share`` as many held out: CIFAR-10's image size and file format, when no copy
    is at hand (benchmarks/train.py's runs read ``test``)."""
    rng = np.random.default_rng(seed)
    for split, count in (("train", n), (held_out, max(10, n // held_out_share))):
        for i in range(count):
            folder = root / split / f"c{i % 10}"
            folder.mkdir(parents=True, exist_ok=True)
            img = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
            Image.fromarray(img).save(folder / f"{i:05d}.jpg", quality=95)
    return root


def paired(cfg_name: str, extra: list[str], tmp: Path, steps: int, quick: bool) -> tuple:
    """(loader ms per step, resident ms per step) of the same config (augment_on device), both
    runs built first and timed in alternating blocks, so load on a shared machine hits both."""
    runs = []
    for more in ([], ["data.resident=device"]):
        over = [*extra, *more, f"out_dir={tmp / 'run'}", "train.progress_bar=false"]
        if quick and cfg_name.startswith("digits"):
            over += ["model.width=8"]
        run = loop.setup(config.load(cfg_name, over))
        run.moco.train()
        run.data.sampler.set_epoch(0, 0)
        runs.append({"run": run, "epoch": 0, "it": iter(run.data.train_loader)})

    def step(r: dict) -> None:
        run = r["run"]
        try:
            x1, x2, y, _, *rows = next(r["it"])
        except StopIteration:
            r["epoch"] += 1
            run.data.sampler.set_epoch(r["epoch"], 0)
            r["it"] = iter(run.data.train_loader)
            x1, x2, y, _, *rows = next(r["it"])
        b = [t.to(run.device, non_blocking=True) for t in (x1, x2, y, *rows)]
        loop.train_step(run, Batch.make(b[0], b[1], b[2], b[3:]), 1.0)

    for r in runs:
        step(r)  # warm-up
    best = [float("inf")] * 2
    sync = torch.cuda.synchronize if runs[0]["run"].device.type == "cuda" else (lambda: None)
    for _ in range(3):
        for k, r in enumerate(runs):
            sync()
            tic = time.perf_counter()
            for _ in range(steps):
                step(r)
            sync()
            best[k] = min(best[k], 1e3 * (time.perf_counter() - tic) / steps)
    return best[0], best[1]


def cifar_root(cifar: Path, tmp: Path) -> Path:
    """train/ and val/ links to the CIFAR-10 JPEG folder's train/ and test/ (imagefolder)."""
    root = tmp / "cifar_links"
    root.mkdir(exist_ok=True)
    for name, target in (("train", "train"), ("val", "test")):
        if not (root / name).exists():
            (root / name).symlink_to((cifar / target).resolve())
    return root


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (seconds), for CI")
    p.add_argument("--results", default=str(ROOT / "benchmarks" / "RESULTS.md"))
    p.add_argument("--no-record", action="store_true", help="print only")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None)
    p.add_argument("--cifar", default="data/cifar10-jpg", help="CIFAR-10 JPEG folder")
    p.add_argument("--images", type=int, default=None, help="images per size (part 1)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per block (part 2)")
    p.add_argument(
        "--parts",
        nargs="+",
        choices=["pipeline", "trainer", "decode"],
        default=["pipeline", "trainer", "decode"],
        help="which parts to run",
    )
    p.add_argument(
        "--reencode",
        default=None,
        help="part 3: re-encode these images (a folder) at 500x375, quality 90, "
        "instead of synthetic ones",
    )
    p.add_argument("--batch", type=int, default=None, help="part 3: images per batch (128)")
    p.add_argument("--imagenet-trainer", action="store_true",
                   help="part 2 on a CPU: also imagenet100_moco.yaml, decode_on cpu vs device "
                   "(always on CUDA)")  # fmt: skip
    p.add_argument("--trainers", default="digits_moco,cifar10_moco,imagenet100_moco",
                   help="part 2's recipes, a comma list (imagenet100_moco: on CUDA or with "
                   "--imagenet-trainer)")  # fmt: skip
    p.add_argument("--cifar-overrides", nargs="*", default=None,
                   help="CIFAR-10 trainer overrides (CPU default: CPU_CIFAR)")  # fmt: skip
    a = p.parse_args()
    a.trainers = [t for t in a.trainers.split(",") if t]
    if not a.trainers or set(a.trainers) - set(TRAINERS):
        p.error(f"--trainers: want a comma list of {', '.join(TRAINERS)}")
    device = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but no CUDA device is available")
    torch.set_num_threads(1)  # part 1 is what one loader worker does
    n = a.images or (16 if a.quick else 512)
    rounds, batch = (1, 8) if a.quick else (3, 128)
    steps = a.steps or (2 if a.quick else 20)
    cifar = Path(a.cifar)
    notes: list[str] = []
    rows = ["| images | path | CPU ms / image | images/s (1 thread) | CPU time old/new |",
            "|---|---|---|---|---|"]  # fmt: skip
    trows = ["| config | augment_on (, decode_on / resident) | trainer step ms | model step ms | "
             "ratio | trainer images/s |", "|---|---|---|---|---|---|"]  # fmt: skip
    drows = ["| images | decode_on: where | CPU ms / image (1 thread) | wall ms / image, device "
             "synchronised | images/s (CPU time for workers, wall time otherwise) |",
             "|---|---|---|---|---|"]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if "pipeline" in a.parts:
            pipeline_part(a, n, rounds, batch, device, cifar, tmp, rows, notes)
        if "decode" in a.parts:
            torch.set_num_threads(1)  # one core on each side (a worker; the training process)
            dn, db = (a.images or (16 if a.quick else 256)), (a.batch or (8 if a.quick else 128))
            if a.reencode:
                files = reencoded_jpegs(Path(a.reencode), tmp, dn)
                what = f"{a.reencode} re-encoded at 500x375 q90"
            else:
                files = imagenet_like_jpegs(tmp, dn)
                what = "synthetic 500x375 q90"
            t = decode_crop(files, device, 1 if a.quick else 3, db)
            drows += decode_rows(f"{what} -> 224 px", t, device)
            notes.append(
                f"decode + crop: {dn} images, batches of {db}, medians of "
                f"{1 if a.quick else 3} interleaved rounds, one thread per side"
                + (
                    "; 'device (cpu)' is the device path's code run on the CPU (how it is tested "
                    "without a GPU), not a GPU figure; wall times on a loaded CPU overstate"
                    if device.type == "cpu"
                    else ""
                )
            )
        if "trainer" in a.parts:
            trainer_part(a, steps, device, cifar, tmp, trows, notes)
    now = f"{datetime.datetime.now():%Y-%m-%d %H:%M}"
    sizes = f"{n} images per size, {rounds} interleaved rounds, " if "pipeline" in a.parts else ""
    head = (f"\n## Input pipeline ({'quick, ' if a.quick else ''}{sizes}stage 2 on {device}; "
            f"parts: {', '.join(a.parts)}), {now}\n\n{machine(device)}\n\n")  # fmt: skip
    text = head
    if "pipeline" in a.parts:
        text += "\n".join(rows) + "\n\n"
    if "decode" in a.parts:
        text += ("Decode + RandomResizedCrop (both views), data.decode_on cpu vs device:\n\n"
                 + "\n".join(drows) + "\n\n")  # fmt: skip
    text += "\n".join(f"- {s}" for s in notes) + "\n"
    if "trainer" in a.parts:
        text += (f"\nTrainer end to end ({steps} steps per block, default workers) vs model-only "
                 "step:\n\n" + "\n".join(trows) + "\n")  # fmt: skip
    print(text)
    if not a.no_record:
        results = Path(a.results)
        if not results.exists():
            results.write_text("# Benchmark results (appended by the scripts in benchmarks/)\n")
        with results.open("a") as f:
            f.write(text)


def pipeline_part(a, n, rounds, batch, device, cifar, tmp, rows, notes) -> None:
    """Part 1 (see the module docstring): rows and notes appended in place."""
    if (cifar / "train").is_dir():
        d = config.load("cifar10_moco.yaml", []).data
        files32 = cifar_files(cifar, n)
        r, _, _, split32 = pipeline_rows("CIFAR-10 32 px", files32, d, device, rounds, batch,
                                         not a.quick)  # fmt: skip
        rows += r
        notes.append(
            "32 px, CPU ms per image, stage 2 compiled (eager in --quick): decode_image "
            f"{split32['decode']:.3f} + stage 1 {split32['crop']:.3f} + stage 2 "
            f"{split32['photometric']:.3f}"
        )
    else:
        msg = f"skipped 32 px and CIFAR-10: no CIFAR-10 JPEG folder at {cifar} (--cifar PATH)"
        print(msg)
        notes.append(msg)
    big = imagenet_like_jpegs(tmp, n)
    for size, name in ((96, "stl10_moco.yaml"), (224, None)):
        d = config.load(name, []).data if name else config.DataConfig()
        d.image_size = size
        r, old_split, new_split, _ = pipeline_rows(f"500x375 JPEG -> {size} px", big, d, device,
                                                   rounds, batch, not a.quick)  # fmt: skip
        rows += r
    o, w = old_split, new_split
    notes.append(
        f"224 px, CPU ms per image: old = PIL decode {o['decode']:.2f} + v2 chain "
        f"{o['rest']:.2f}; new = decode_image {w['decode']:.2f} + crop {w['crop']:.2f} + "
        f"photometric {w['photometric']:.2f}"
    )


def imagefolder_of(files: list[Path], root: Path) -> Path:
    """train/c0, train/c1 (links to ``files``, alternating) and val/ with the first four."""
    for i, f in enumerate(files):
        for split in ("train", "val") if i < 4 else ("train",):
            folder = root / split / f"c{i % 2}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f.name).symlink_to(f.resolve())
    return root


def imagenet_trainer(a, steps, device, tmp, trows, notes) -> None:
    """imagenet100_moco.yaml on 500x375 JPEGs (synthetic or --reencode), data.decode_on cpu vs
    device: the trainer against the model-only step (their gap is the input pipeline's cost)."""
    n = 64 if a.quick else 768
    (tmp / "in_src").mkdir(exist_ok=True)
    if a.reencode:
        files = reencoded_jpegs(Path(a.reencode), tmp / "in_src", n)
    else:
        files = imagenet_like_jpegs(tmp / "in_src", n)
    root = imagefolder_of(files, tmp / "in_like")
    # the queue fits the 768 images (16,384 in the recipe); the input pipeline does not see it
    extra = list(CPU_IN100) if device.type == "cpu" else ["moco.queue_size=512"]
    if a.quick:
        extra += ["train.batch_size=16", "model.width=8", "moco.queue_size=32",
                  "data.image_size=64"]  # fmt: skip
    for decode in ("cpu", "device"):
        over = [*extra, "data.name=imagefolder", f"data.root={root}", f"data.decode_on={decode}",
                f"out_dir={tmp / ('run_in_' + decode)}", "train.progress_bar=false"]  # fmt: skip
        cfg = config.load("imagenet100_moco.yaml", over)
        tr, mo = trainer_vs_model(cfg, steps)
        ips = 1e3 * cfg.train.batch_size / tr
        trows.append(f"| imagenet100_moco.yaml | device, decode_on {decode} | {tr:.1f} | "
                     f"{mo:.1f} | {tr / mo:.2f}x | {ips:.0f} |")  # fmt: skip
    notes.append(
        f"ImageNet-100 trainer: imagenet100_moco.yaml on {n} "
        f"{'re-encoded' if a.reencode else 'synthetic'} 500x375 JPEGs (data.name=imagefolder), "
        f"{' '.join(extra)}; default data.num_workers"
    )


def trainer_part(a, steps, device, cifar, tmp, trows, notes) -> None:
    """Part 2 (see the module docstring): rows and notes appended in place."""
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if (device.type == "cuda" or a.imagenet_trainer) and "imagenet100_moco" in a.trainers:
        imagenet_trainer(a, steps, device, tmp, trows, notes)
    trainers = [("digits_moco.yaml", [])] if "digits_moco" in a.trainers else []
    extra = a.cifar_overrides
    if extra is None:
        extra = CPU_CIFAR if device.type == "cpu" else []
    if a.quick:
        extra = [*extra, "train.batch_size=32", "model.width=8", "moco.queue_size=256"]
    if "cifar10_moco" in a.trainers:
        if (cifar / "train").is_dir():
            root, what = cifar_root(cifar, tmp), f"the JPEG folder {cifar}"
        else:  # the CIFAR-10 layout and file format, random pixels: the real set's input cost
            n = 512 if a.quick else SYNTHETIC_CIFAR
            root, what = synthetic_cifar(tmp / "cifar_synthetic", n), f"{n} synthetic 32 px JPEGs"
        trainers.append(("cifar10_moco.yaml", ["data.name=imagefolder", f"data.root={root}",
                                               *extra]))  # fmt: skip
        notes.append(f"CIFAR-10 trainer: cifar10_moco.yaml on {what}, {' '.join(extra)}")
    notes.append(
        "rows 'device, resident': data.resident=device, the training split decoded once at "
        "setup (not timed) and held on the device, batches and both views' augmentation made "
        "there; the other rows read it through the loader (default data.num_workers)"
    )
    variants = (("device", []), ("workers", []), ("device, resident", ["data.resident=device"]))
    ms = {}
    for cfg_name, extra in trainers:
        for where, more in variants:
            over = [*extra, f"data.augment_on={where.split(',')[0]}", *more,
                    f"out_dir={tmp / 'run'}", "train.progress_bar=false"]  # fmt: skip
            if a.quick and cfg_name.startswith("digits"):
                over += ["model.width=8"]
            cfg = config.load(cfg_name, over)
            tr, mo = trainer_vs_model(cfg, steps)
            ms[cfg_name, where] = tr
            ips = 1e3 * cfg.train.batch_size / tr
            trows.append(f"| {cfg_name} | {where} | {tr:.1f} | {mo:.1f} | {tr / mo:.2f}x | "
                         f"{ips:.0f} |")  # fmt: skip
        loader, held = paired(cfg_name, extra, tmp, steps, quick=a.quick)
        notes.append(f"{cfg_name}: resident trainer {loader / held:.2f}x the loader path's speed "
                     f"({loader:.1f} / {held:.1f} ms per step, augment_on device, the two runs' "
                     "blocks interleaved, best of 3 each; the table's rows are measured one "
                     "after the other, under whatever load came)")  # fmt: skip


if __name__ == "__main__":
    main()
