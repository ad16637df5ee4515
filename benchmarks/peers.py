"""Side by side with lightly: the same MoCo v2 on the same CIFAR-10 images, timed in one run; and
negmine's OC-SVM beside scikit-learn's and thundersvm-cpu's.

    pip install -e ".[bench]"   # lightly and thundersvm-cpu: the benchmark's, not the library's
    python benchmarks/peers.py [--device cpu|cuda] [--quick] [--data CIFAR10_JPEG_DIR]
        [--train-images N] [--test-images N] [--arch resnet-18|resnet-9] [--width W]
        [--batch B] [--epochs E] [--seeds S] [--budget SECONDS] [--runs LIST] [--precision LIST]
        [--ocsvm-sizes LIST] [--parts moco,ocsvm] [--summary PATH] [--results PATH] [--no-record]

Part ``moco``: lightly's CIFAR-10 benchmark model (its ``MocoModel``, benchmarks/peers_models.py:
ResNet-18 from ``ResNetGenerator`` with 8 BN splits, ``MoCoProjectionHead(512, 512, 128)``,
``NTXentLoss`` with a 4096-key memory bank at T 0.1, momentum 0.99, the two-key symmetric loss (the
mean of its two terms), batch shuffle, SGD 0.06 x batch/128) in a plain PyTorch loop, reading the
images with lightly's ``LightlyDataset`` + ``MoCoV2Transform`` and a standard ``DataLoader``; and
negmine's ``cifar10_moco.yaml`` set to the same settings (the same two-key layout,
``moco.symmetric_keys`` + ``loss.name=infonce``, whose loss is the sum of the two terms: at half the
learning rate and twice the weight decay, which makes lightly's SGD updates; MATCHED in
benchmarks/peers_models.py), once through its loader (``data.resident=off``) and once with the
training split resident on the device (``data.resident=device``, the default on CUDA). The runs are
interleaved one epoch at a time in rounds (lightly, negmine, negmine resident, then negmine
resident, negmine, lightly: the order reversed every other round, so that neither side always
follows the other; an epoch is a block: a loader's workers live only inside its own block, so no
run's prefetching runs in another's time), on the same images (``--data``, a subset of
``--train-images`` / ``--test-images``, a whole number per class; without ``--data``: random JPEGs
in CIFAR-10's layout). Per block: images/s, the step split into data wait (host time in
``next(loader)`` and the upload; on CUDA the device work of a batch lands in compute) and compute,
the peak memory (``PeakMemory`` of benchmarks/step.py: RSS above the block's start on a CPU,
``max_memory_allocated`` on CUDA). Every run trains the same number of whole epochs (``--epochs``,
default 4: a warm-up epoch and 3 timed ones; with ``--budget`` as many as fit, at least those 4:
each pair gets its share of what the pairs before it left, and where its first timed round shows
that 3 timed epochs do not fit, its runs are built again on fewer images, each with its own
warm-up epoch, and the pair's line says how many and from how many), then the kNN (k 200,
T 0.1, negmine's ``knn_top1`` for both) on the backbone features, training subset as bank, held-out
subset as queries, each with its own eval transform. ``--seeds S`` (default 3 on a CPU, 1 on CUDA)
repeats the whole contest with seeds 0..S-1: the kNN's spread over the seeds is the tolerance for
"equal accuracy". The ratio negmine/lightly is taken block by block (each negmine epoch over the
lightly epoch of the same round, the first epoch of every run left out when there are more), its
median and range printed; never across runs of different processes. The table's ``matched`` column
says ``yes`` for a run at lightly's settings, else what differs (the resident run: its data path).

Part ``ocsvm``: ``negatives.ocsvm.OneClassSVM`` against scikit-learn's ``OneClassSVM`` and
thundersvm-cpu's (when installed) at n = 256 ... 16384 (``--ocsvm-sizes``) on benchmarks/ocsvm.py's
``clustered`` embeddings at MiOC's (nu, gamma) = (0.01, 0.01): fit and scoring of 4096 held-out
points timed apart (medians of interleaved repeats), and the decisions' agreement with
scikit-learn's on those points (the share with the same sign).

Each pair runs at one precision on both sides; ``--precision`` lists the pairs (default
``fp32,bf16`` on CUDA, ``fp32`` on a CPU; each pair its share of ``--budget``): fp32 everywhere, or
bf16 autocast of the encoders with the loss in float32 (negmine's ``train.amp=bf16``; lightly's
forwards under ``torch.autocast``). negmine's ``train.amp=auto`` is never used here: it picks bf16
on a bf16-capable CPU and fp32 on another, which would pair different precisions by machine.

``--quick`` (CPU, CI): lightly's ``resnet-9`` at width 0.125 against negmine's ``resnet_small`` of
width 8 (the same net: one BasicBlock per stage), 320 random JPEGs, batch 32, queue 64, one epoch,
OC-SVM at n = 256 only: the whole path in about a minute. Without lightly installed the moco part is
skipped with a message (the ocsvm part still runs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.input import synthetic_cifar  # noqa: E402
from benchmarks.peers_models import (  # noqa: E402
    LOSS_SCALE,
    MATCHED,
    PRECISIONS,
    UNMATCHED,
    Sizes,
)
from benchmarks.peers_run import CONTESTANTS, KNN_K, KNN_T, contest, medians  # noqa: E402
from benchmarks.results_md import record_table  # noqa: E402
from pretrain.runtime import dist  # noqa: E402

BUNDLE = Path("/tmp/data/cifar10")  # where .gpu/setup.sh unpacks CIFAR-10
ALONE_ROUNDS = 5  # the step alone: rounds of one fixed-batch step per run
QUICK = {"arch": "resnet-9", "width": 0.125, "batch": 32, "queue": 64, "epochs": 1,
         "train_images": 320, "test_images": 100}  # fmt: skip


def subset(source: Path, dest: Path, split: str, n: int) -> int:
    """Hard links (copies across file systems) of the first n / classes images of each class."""
    classes = sorted(p for p in (source / split).iterdir() if p.is_dir())
    per = n // len(classes) if n else 0
    count = 0
    for c in classes:
        files = sorted(f for f in c.iterdir() if f.is_file())
        for f in files[:per] if per else files:
            target = dest / split / c.name / f.name
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(f, target)
            except OSError:
                target.write_bytes(f.read_bytes())
            count += 1
    return count


def prepare(a: argparse.Namespace, work: Path) -> tuple[Path, str]:
    source = Path(a.data) if a.data else (BUNDLE if BUNDLE.is_dir() and not a.quick else None)
    if source is None:
        source = synthetic_cifar(work / "synthetic", a.train_images or 5120, held_out="test")
        what = "random 32-px JPEGs in CIFAR-10's layout (no --data)"
    else:
        what = f"{source}"
    if not (source / "train").is_dir() or not (source / "test").is_dir():
        sys.exit(f"peers: --data {source}: want train/ and test/ class folders of images")
    root = work / "data"
    n_train = subset(source, root, "train", a.train_images)
    n_test = subset(source, root, "test", a.test_images)
    return root, f"{what}: {n_train} training images, {n_test} held out"


def shrunk(root: Path, dest: Path, n: int) -> Path:
    """A root of the first ``n`` / classes training images of each class of ``root`` and all of
    its held-out ones (peers_run.contest's ``shrink``: fewer images where the budget is short)."""
    subset(root, dest, "train", n)
    subset(root, dest, "test", 0)
    return dest


def pair_share(budget: float, spent: float, pairs_left: int) -> float:
    """The seconds of ``--budget`` for the next pair: what the pairs before it (their kNN too)
    left of it, split evenly among the pairs still to run; 0 without a budget."""
    return max(budget - spent, 0.0) / pairs_left if budget else 0.0


def ran(meta: dict, budget: float) -> str:
    """What a pair trained on: its images, and why fewer than asked where it sized itself."""
    text = f"{meta['images']} training images"
    if "sized_from" in meta:
        text += (f" (sized down from {meta['sized_from']}: a warm-up and 3 timed epochs at "
                 f"those did not fit the pair's {budget:.0f} s)")  # fmt: skip
    return text


def versions() -> str:
    """The commit (``NEGMINE_COMMIT`` where the copy has no .git) and the peers' versions."""
    from importlib import metadata

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                                capture_output=True, timeout=10).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            text=True,
            capture_output=True,
            timeout=10,
        ).stdout
        commit += " (with uncommitted changes)" if dirty.strip() else ""
    except (OSError, subprocess.SubprocessError):
        commit = ""
    commit = os.environ.get("NEGMINE_COMMIT", commit) or "unknown"
    found = []
    for name in ("lightly", "torchvision", "numpy", "scikit-learn", "thundersvm-cpu"):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} not installed")
    return f"commit {commit}; " + ", ".join(found)


def ratio_line(blocks: dict[str, list[dict]], name: str, base: str) -> str:
    """negmine/lightly images/s block by block (each over the base block just before it)."""
    every = [(b["ips"] / a["ips"], b["epoch"]) for b, a in zip(blocks[name], blocks[base])]
    pairs = [r for r, e in every if e > 0] or [r for r, _ in every]
    med = statistics.median(pairs)
    return f"{med:.2f}x [{min(pairs):.2f}, {max(pairs):.2f}] over {len(pairs)} blocks"


def matched(name: str, sizes: Sizes) -> str:
    """The table's ``matched`` cell of run ``name``: ``yes`` where it runs lightly's settings
    (one precision, the two-key loss at lightly's updates, the same model and schedule: MATCHED
    in benchmarks/peers_models.py), else what differs."""
    if CONTESTANTS[name] == "device":
        return "yes, but the data resident on the device (lightly's through its loader)"
    return "yes"


def sampling(meta: dict, seeds: int) -> str:
    """How the figures were sampled: epochs after the warm-up, seeds, the order of the runs."""
    after = meta["epochs"] - 1
    epochs = (f"{after} epoch(s) after a warm-up epoch (medians over them)" if after > 0 else
              "one epoch, no warm-up left out")  # fmt: skip
    turns = ("the order alternating round by round (lightly first, then last)"
             if meta["rounds"] > 1 else "one round (lightly first)")  # fmt: skip
    return f"{epochs}; {seeds} seed(s); {turns}"


def moco_part(a: argparse.Namespace, work: Path, device: str) -> tuple[list[str], list[str]]:
    try:
        import lightly  # noqa: F401
    except ImportError:
        msg = 'moco part skipped: lightly is not installed (pip install -e ".[bench]")'
        print(f"peers: {msg}", flush=True)
        return [msg, ""], []
    root, what = prepare(a, work)
    runs = [r for r in a.runs.split(",") if r]
    head = ["| run | precision | matched | images/s (median of blocks) | data wait ms/step | "
            "compute ms/step | peak MiB | kNN top-1 per seed | vs lightly images/s | step alone "
            "ms | vs lightly, step alone |", "|" + "---|" * 11]  # fmt: skip
    lines, rows, knn_lines, summary = [], [], [], []
    tic = time.monotonic()
    for i, precision in enumerate(a.precision):
        s = Sizes(arch=a.arch, width=a.width, batch=a.batch, queue=a.queue,
                  epochs=a.epochs or 200, precision=precision)  # fmt: skip
        budget = pair_share(a.budget, time.monotonic() - tic, len(a.precision) - i)

        def shrink(n: int, p: str = precision) -> Path:
            return shrunk(root, work / f"data_{p}_{n}", n)

        res = contest(runs, s, root, work / precision, device, a.seeds, a.epochs, budget,
                      a.workers, ALONE_ROUNDS, shrink=shrink)  # fmt: skip
        blocks, knn, meta = res["blocks"], res["knn"], res["meta"]
        lines += [f"{precision} pair: data: {what}; {ran(meta, budget)}; device {device}; "
                  f"precision {s.precision} on "
                  f"both sides (matched); {meta['epochs']} whole epochs per run, {meta['steps']} "
                  f"steps of batch {s.batch} each; {sampling(meta, a.seeds)}; loader workers "
                  f"{meta['workers']}; torch threads {torch.get_num_threads()}", "",
                  f"model: lightly {s.arch} width {s.width} / negmine {meta['negmine_arch']}; "
                  f"parameters (backbone, head): lightly {meta['params']['lightly']}, negmine "
                  f"{meta['params']['negmine']}; K {s.queue}, T {s.temperature}, m {s.momentum}, "
                  f"{s.splits} BN splits, lr {s.lr:g} (negmine {s.lr / LOSS_SCALE:g} on its "
                  "summed loss)", ""]  # fmt: skip
        alone = meta["step_alone_ms"]
        for name in runs:
            bl = blocks[name]
            med = medians(bl)
            ips, wait, comp = med["ips"], med["wait_ms"], med["compute_ms"]
            peak = max(b["peak"] for b in bl) / 2**20
            accs = knn[name]
            ratio = "1.00x" if name == "lightly" else ratio_line(blocks, name, "lightly")
            rows.append(f"| {name} | {meta['precision'][name]} | {matched(name, s)} | {ips:.0f} | "
                        f"{wait:.1f} | {comp:.1f} | {peak:.0f} | "
                        f"{', '.join(f'{x:.2f}' for x in accs)} | {ratio} | {alone[name]:.1f} | "
                        f"{alone['lightly'] / alone[name]:.2f}x |")  # fmt: skip
            figures = f"{ips:.0f}, {statistics.mean(accs):.2f}, {ratio.split(' ')[0]}"
            summary.append(f"| peers {name} {precision} (matched): images/s, kNN, vs lightly | "
                           f"{figures} |")  # fmt: skip
        knn_lines += [f"{precision}:", "", *knn_verdict(knn, runs), ""]
    lines += [*head, *rows]
    peak = ("CUDA max_memory_allocated above the block's start" if device == "cuda" else
            "resident set of the training process above the block's start, loader workers not "
            "counted")  # fmt: skip
    lines += ["", f"(medians over the epochs after each run's first when there are more; peak: "
              f"{peak}; kNN k {KNN_K}, T {KNN_T} on the backbone features; step alone: one "
              f"training step on one fixed batch, no loader, median of {ALONE_ROUNDS} rounds "
              "interleaved after seed 0's kNN, negmine's with its stage-2 photometric ops (in "
              "its step by design), lightly's batch augmented by its loader; on a CPU the loader "
              "workers share the cores, so images/s can differ from the step alone by more than "
              "the data wait)", ""]  # fmt: skip
    lines += [*knn_lines]
    lines += ["Matched (benchmarks/peers_models.py MATCHED):", ""]
    lines += [f"- {m}" for m in MATCHED] + [""]
    lines += ["Not matched (benchmarks/peers_models.py UNMATCHED):", ""]
    lines += [f"- {u}" for u in UNMATCHED] + [""]
    return lines, summary


def knn_verdict(knn: dict[str, list[float]], runs: list[str]) -> list[str]:
    """Each negmine run's mean kNN against lightly's, with the seeds' spread as the tolerance."""
    out = []
    base = knn.get("lightly")
    if not base:
        return out
    for name in runs:
        if name == "lightly":
            continue
        accs = knn[name]
        spread = max(max(base) - min(base), max(accs) - min(accs))
        diff = statistics.mean(accs) - statistics.mean(base)
        if len(base) < 2:
            out.append(f"- kNN {name} - lightly: {diff:+.2f} points (one seed: no spread to "
                       "judge it by; --seeds 2 or more)")  # fmt: skip
        else:
            verdict = "within" if abs(diff) <= spread else "OUTSIDE"
            overlap = "overlap" if min(accs) <= max(base) and min(base) <= max(accs) else (
                "do not overlap: " + ("below" if max(accs) < min(base) else "above") +
                " in every seed")  # fmt: skip
            out.append(f"- kNN {name} - lightly: {diff:+.2f} points, {verdict} the seeds' "
                       f"spread ({spread:.2f} points); the seeds' ranges [{min(accs):.2f}, "
                       f"{max(accs):.2f}] and [{min(base):.2f}, {max(base):.2f}] "
                       f"{overlap}")  # fmt: skip
    return out


def ocsvm_part(a: argparse.Namespace, device: str) -> tuple[list[str], list[str]]:
    from benchmarks.peers_ocsvm import compare

    sizes = [int(n) for n in a.ocsvm_sizes.split(",") if n]
    return compare(sizes, device, repeats=3 if a.quick else 7)


def options(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, its defaults filled in by mode and device (``a.device``: cpu or cuda;
    ``a.precision``: a list); exits 2 on a bad value."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="", help="cpu or cuda (default: the trainer's)")
    p.add_argument("--quick", action="store_true", help="CPU, CI: tiny model and data")
    p.add_argument("--data", default="", help=f"CIFAR-10 JPEG folder (default {BUNDLE} if there)")
    p.add_argument("--train-images", type=int, default=0, help="0 = all of --data's")
    p.add_argument("--test-images", type=int, default=0, help="0 = all of --data's")
    p.add_argument("--arch", default="resnet-18", choices=("resnet-18", "resnet-9"))
    p.add_argument("--width", type=float, default=1.0, help="lightly's width multiplier")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--queue", type=int, default=4096)
    p.add_argument("--epochs", type=int, default=None,
                   help="whole epochs per run, the first a warm-up (default 4; --quick 1; with "
                        "--budget: as many as it allows)")  # fmt: skip
    p.add_argument("--budget", type=float, default=0.0, help="seconds for the training (moco)")
    p.add_argument("--seeds", type=int, default=None,
                   help="default 3 on a CPU, 1 on CUDA and with --quick")  # fmt: skip
    p.add_argument("--precision", default="",
                   help="comma list of the pairs' precisions, each on both sides: fp32, or "
                        "bf16 autocast (default fp32,bf16 on CUDA, else fp32)")  # fmt: skip
    p.add_argument("--workers", type=int, default=-1, help="loader workers, both (-1: negmine's)")
    p.add_argument("--runs", default="", help="comma list of " + ", ".join(CONTESTANTS))
    p.add_argument("--parts", default="moco,ocsvm")
    p.add_argument("--ocsvm-sizes", default="256,1024,4096,16384")
    p.add_argument("--summary", default="", help="append | figure | value | rows here")
    p.add_argument("--results", default=str(Path(__file__).with_name("RESULTS.md")))
    p.add_argument("--no-record", action="store_true", help="print only")
    a = p.parse_args(argv)
    device = a.device = a.device or dist.device_type()
    if a.quick:
        for key, value in QUICK.items():
            if getattr(a, key) == p.get_default(key):
                setattr(a, key, value)
        if a.ocsvm_sizes == p.get_default("ocsvm_sizes"):
            a.ocsvm_sizes = "256"
    if a.epochs is None:
        a.epochs = 1 if a.quick else (0 if a.budget else 4)
    if a.epochs < 0 or (not a.epochs and not a.budget):
        p.error(f"--epochs {a.epochs}: want whole epochs >= 1 (0 only with --budget)")
    if a.seeds is None:
        a.seeds = 1 if a.quick or device == "cuda" else 3
    if a.seeds < 1:
        p.error(f"--seeds {a.seeds}: want 1 or more")
    a.precision = [x for x in (a.precision or ("fp32,bf16" if device == "cuda" else "fp32"))
                   .split(",") if x]  # fmt: skip
    if (
        not a.precision
        or set(a.precision) - set(PRECISIONS)
        or len(set(a.precision)) < len(a.precision)
    ):
        p.error(f"--precision: want a comma list of different {', '.join(PRECISIONS)}; got "
                f"{','.join(a.precision)}")  # fmt: skip
    if not a.runs:
        a.runs = "lightly,negmine,negmine_resident" if device == "cuda" else "lightly,negmine"
    unknown = [r for r in a.runs.split(",") if r not in CONTESTANTS]
    if unknown or "lightly" not in a.runs.split(","):
        p.error(f"--runs: want lightly and any of {', '.join(CONTESTANTS)}; got {a.runs}")
    return a


def main() -> None:
    a = options()
    device = a.device
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("peers: --device cuda: no CUDA device")
    os.environ["NEGMINE_DEVICE"] = device
    work = Path(tempfile.mkdtemp(prefix="negmine_peers_"))
    tic = time.monotonic()
    lines = [f"command: python benchmarks/peers.py {' '.join(sys.argv[1:])}", "", versions(), ""]
    summary = []
    parts = a.parts.split(",")
    if "moco" in parts:
        more, rows = moco_part(a, work, device)
        lines, summary = lines + more, summary + rows
    if "ocsvm" in parts:
        more, rows = ocsvm_part(a, device)
        lines, summary = lines + more, summary + rows
    lines.append(f"({time.monotonic() - tic:.0f} s in all)")
    record_table("Compared with lightly (MoCo v2, CIFAR-10) and OC-SVM peers", lines, a.results,
                 not a.no_record, device)  # fmt: skip
    if a.summary:
        with open(a.summary, "a") as f:
            f.write("\n".join(summary) + "\n")


if __name__ == "__main__":
    main()
