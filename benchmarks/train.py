"""Whole epochs of the CIFAR-10 recipes within a time budget: images/s, data-wait, epoch time, kNN.

    python benchmarks/train.py [--device cpu|cuda] [--quick] [--data CIFAR10_JPEG_DIR]
        [--budget SECONDS] [--runs LIST] [--capture off|on|both] [--keep DIR] [--summary PATH]
        [--results PATH] [--no-record]

Runs ``python -m pretrain`` (the trainer as a user runs it) for each of, in this order:

    moco_resident   cifar10_moco.yaml, data.resident=device (the split decoded once, on the device)
    moco_loader     cifar10_moco.yaml, data.resident=off (JPEGs through the loader every epoch)
    mioc_resident   cifar10_mioc.yaml, data.resident=device, OC-SVM from the first step
                    (negatives.kwargs.warmup_epochs=0)
    mioc_loader     cifar10_mioc.yaml, data.resident=off, the same

on the CIFAR-10 JPEG folder ``--data`` (``train/``, ``test/``: the ``.gpu/`` bundle unpacks it to
/tmp/data/cifar10, taken by default when it is there) as ``data.name=imagefolder``, with the
recipe's kNN monitor after every epoch (``eval.knn_every: 1``). Each run gets a share of
``--budget`` (moco 20 % each, mioc 30 % each; the decoded split is cached once for all four,
``NEGMINE_CACHE_DIR``) and is stopped with SIGTERM (the trainer's clean stop: a checkpoint) as soon
as its next epoch would not fit in its share, so it runs as many whole epochs as fit. Per run
and epoch: the epoch's training time (``epoch_time_s``, without the kNN), the median images/s and
data-wait of its logged steps (``train.log_every``), and the kNN top-1; the kNN at the end is the
last whole epoch's. For MiOC, the OC-SVM path that ran (``neg_ocsvm_path``: triton, device,
sklearn, or a fallback).

``--capture`` (CUDA): ``on`` runs the MoCo runs with ``train.cuda_graphs=on`` (the whole step
captured as one CUDA graph and replayed), ``off`` (default) with ``off``; ``both`` runs each MoCo
run twice, captured and eager, one after the other (the captured one first for the first run,
the eager one first for the next: the order alternates), each with the run's whole share of the
budget. The MiOC runs stay eager (MiOC is not capturable: ``negatives/mioc.py``
``why_not_capturable``). Refused on a CPU (CUDA graphs need CUDA).

``--quick`` (CPU, CI): 64 random 32-px JPEGs in CIFAR-10's layout, a width-8 ResNet-18 at batch 16,
one epoch each (no budget stop needed): the same code path in about a minute.
``--summary PATH``: one ``| figure | value |`` row per run (benchmarks/gpu_suite.sh collects them).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.input import synthetic_cifar  # noqa: E402
from benchmarks.results_md import record_table  # noqa: E402
from pretrain.runtime import dist  # noqa: E402

BUNDLE = Path("/tmp/data/cifar10")  # where .gpu/setup.sh unpacks CIFAR-10
RUNS = {  # name: (config, overrides, share of the budget)
    "moco_resident": ("cifar10_moco.yaml", ["data.resident=device"], 0.2),
    "moco_loader": ("cifar10_moco.yaml", ["data.resident=off"], 0.2),
    "mioc_resident": ("cifar10_mioc.yaml", ["data.resident=device",
                                            "negatives.kwargs.warmup_epochs=0"], 0.3),
    "mioc_loader": ("cifar10_mioc.yaml", ["data.resident=off",
                                          "negatives.kwargs.warmup_epochs=0"], 0.3),
}  # fmt: skip
QUICK = ["model.width=8", "train.batch_size=16", "moco.queue_size=32", "eval.knn_k=5",
         "train.epochs=1", "data.num_workers=1"]  # fmt: skip
QUICK_MIOC = ["negatives.kwargs.num_synthetic=16", "negatives.kwargs.num_inlier_synthetic=8"]
CAPTURE = {"on": ("graphs", ["train.cuda_graphs=on"]),
           "off": ("eager", ["train.cuda_graphs=off"])}  # fmt: skip
CAPTURABLE = ("moco_resident", "moco_loader")  # MiOC is not capturable
STOP_GRACE_S = 30  # after SIGTERM: the checkpoint, then the process leaves


def read_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            break
    return out


def train(name: str, cmd: list[str], out: Path, share: float, env: dict, log: Path) -> dict:
    """Run the trainer until done or until its next epoch would pass ``share`` seconds."""
    tic = time.monotonic()
    metrics = out / "metrics.jsonl"
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                start_new_session=True)  # fmt: skip
        stopped, seen, last_epoch_at = "", 0, None
        while proc.poll() is None:
            time.sleep(0.2)
            now = time.monotonic() - tic
            epochs = [r for r in read_log(metrics) if r.get("kind") == "epoch"]
            if len(epochs) > seen:  # an epoch (and its kNN) ended: does the next one fit?
                gap = now - last_epoch_at if last_epoch_at is not None else None
                seen, last_epoch_at = len(epochs), now
                if gap is not None and now + 1.1 * gap > share:
                    stopped = f"stopped after epoch {seen}: the next would pass {share:.0f} s"
            if not stopped and now > share:
                stopped = f"stopped at {share:.0f} s, inside epoch {seen + 1}"
            if stopped:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                break
    records = read_log(metrics)
    steps = [r for r in records if r.get("kind") == "step"]
    epochs = [r for r in records if r.get("kind") == "epoch"]
    rows = []
    for e in epochs:
        mine = [s for s in steps if e["epoch"] - 1 < s["epoch"] <= e["epoch"]]
        rows.append({
            "epoch": e["epoch"],
            "epoch_s": e["epoch_time_s"],
            "images_per_s": statistics.median(s["images_per_s"] for s in mine) if mine else None,
            "data_wait": statistics.median(s["data_wait_frac"] for s in mine) if mine else None,
            "knn": e.get("knn_top1"),
        })  # fmt: skip
    paths = sorted({s["neg_ocsvm_path"] for s in steps if "neg_ocsvm_path" in s})
    ok = proc.returncode == 0 and (stopped or epochs)
    return {"name": name, "rows": rows, "paths": paths, "wall_s": time.monotonic() - tic,
            "stopped": stopped or "finished", "ok": bool(ok),
            "returncode": proc.returncode}  # fmt: skip


def plan(names: list[str], capture: str) -> list[tuple[str, str, list[str], float]]:
    """(label, run, overrides, share) in running order: with ``capture`` both, each capturable
    run captured and eager one after the other, the order alternating run by run."""
    out, turn = [], 0
    for name in names:
        cfg, over, share = RUNS[name]
        if name not in CAPTURABLE:
            out.append((name, cfg, over, share))
            continue
        settings = ["on", "off"] if capture == "both" else [capture]
        if turn % 2:
            settings.reverse()
        turn += capture == "both"
        for setting in settings:
            label, extra = CAPTURE[setting]
            tag = f"{name} {label}" if capture != "off" else name
            out.append((tag, cfg, [*over, *extra], share))
    return out


def capture_ratios(results: list[tuple[str, list[str], dict]]) -> list[str]:
    """``- RUN: captured / eager images/s = X`` for each run measured both ways (their medians
    over the whole epochs after the first, :func:`run_summary`)."""
    ips = {r["name"]: run_summary(r)[1] for _, _, r in results}
    out = []
    for name in CAPTURABLE:
        graphs, eager = ips.get(f"{name} graphs"), ips.get(f"{name} eager")
        if graphs is None or eager is None:
            continue
        ratio = f"{float(graphs) / float(eager):.2f}x" if "-" not in (graphs, eager) else "-"
        out.append(f"- {name}: captured / eager images/s = {ratio} ({graphs} / {eager})")
    return ["", *out] if out else []


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


STEADY_EPOCHS = 2  # whole epochs after the warm-up epoch before a steady figure is reported


def steady_note(r: dict) -> str:
    """``""`` when ``r`` has :data:`STEADY_EPOCHS` whole epochs after its first (the warm-up:
    compiles, caches), else ``no steady figure: only N epochs after warm-up``."""
    after = max(0, len(r["rows"]) - 1)
    return "" if after >= STEADY_EPOCHS else f"no steady figure: only {after} epochs after warm-up"


def run_summary(r: dict) -> tuple[str, str, str, str, str]:
    """(epoch s, images/s, data-wait %, kNN at the end, OC-SVM path): the speeds are medians over
    the steady epochs (the whole epochs after the first, which warms up; docs/performance.md's
    metric definitions), ``-`` with fewer than :data:`STEADY_EPOCHS` (:func:`steady_note`)."""
    rows = [] if steady_note(r) else r["rows"][1:]

    def med(key: str) -> float | None:
        values = [x[key] for x in rows if x[key] is not None]
        return statistics.median(values) if values else None

    wait = med("data_wait")
    knn = r["rows"][-1]["knn"] if r["rows"] else None
    return (fmt(med("epoch_s"), ".1f"), fmt(med("images_per_s"), ".0f"),
            fmt(None if wait is None else 100 * wait, ".0f"), fmt(knn, ".2f"),
            ", ".join(r["paths"]) or "-")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="", help="cpu or cuda (default: the trainer's)")
    p.add_argument("--data", default="", help=f"CIFAR-10 JPEG folder (default {BUNDLE} if there)")
    p.add_argument("--budget", type=float, default=240.0, help="seconds for all the runs")
    p.add_argument("--runs", default=",".join(RUNS), help="comma list of " + ", ".join(RUNS))
    p.add_argument("--capture", default="off", choices=("off", "on", "both"),
                   help="train.cuda_graphs of the MoCo runs (both: each both ways)")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="CPU: tiny model and data, 1 epoch")
    p.add_argument("--keep", default="", help="copy each run's metrics.jsonl and log here")
    p.add_argument("--summary", default="", help="append | figure | value | rows here")
    p.add_argument("--results", default=str(Path(__file__).with_name("RESULTS.md")))
    p.add_argument("--no-record", action="store_true", help="print only")
    a = p.parse_args()
    names = [n for n in a.runs.split(",") if n]
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        p.error(f"--runs: unknown {unknown} (runs: {', '.join(RUNS)})")
    device = a.device or dist.device_type()
    if a.capture != "off" and device != "cuda":
        p.error(f"--capture {a.capture}: CUDA graphs need CUDA (the device is {device})")
    work = Path(tempfile.mkdtemp(prefix="negmine_train_"))
    data = Path(a.data) if a.data else (BUNDLE if BUNDLE.is_dir() and not a.quick else None)
    if data is None:
        data = synthetic_cifar(work / "cifar10", 64 if a.quick else 5120, held_out="test",
                               held_out_share=5)  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "NEGMINE_CACHE_DIR": str(work / "cache")}
    if a.device:
        env["NEGMINE_DEVICE"] = a.device
    keep = Path(a.keep) if a.keep else None
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + a.budget
    results = []
    todo = plan(names, a.capture)
    for i, (name, cfg, over, share) in enumerate(todo):
        left = deadline - time.monotonic()
        rest = sum(t[3] for t in todo[i:])
        seconds = max(1.0, left * share / rest)  # what earlier runs left, shared out
        base = name.split(" ")[0]
        over = [*over, *(QUICK if a.quick else []),
                *(QUICK_MIOC if a.quick and base.startswith("mioc") else [])]  # fmt: skip
        out = work / name.replace(" ", "_")
        log_every = 1 if a.quick else 10
        cmd = [sys.executable, "-m", "pretrain", "--cfg", cfg, "data.name=imagefolder",
               f"data.root={data}", f"out_dir={out}", f"train.log_every={log_every}",
               "train.progress_bar=false", *over]  # fmt: skip
        print(f"train: {name} ({seconds:.0f} s): {' '.join(cmd[1:])}", flush=True)
        log = (keep or work) / f"{name.replace(' ', '_')}.log"
        r = train(name, cmd, out, seconds, env, log)
        if keep and (out / "metrics.jsonl").exists():
            kept = keep / f"{name.replace(' ', '_')}.metrics.jsonl"
            kept.write_bytes((out / "metrics.jsonl").read_bytes())
        if not r["ok"]:
            tail = "\n".join(log.read_text().splitlines()[-15:])
            print(f"train: {name} failed (exit {r['returncode']}):\n{tail}", flush=True)
        print(f"train: {name}: {len(r['rows'])} whole epochs in {r['wall_s']:.0f} s, "
              f"{r['stopped']}", flush=True)  # fmt: skip
        if steady_note(r):
            print(f"train: {name}: {steady_note(r)}", flush=True)
        results.append((cfg, over, r))

    lines = [f"data: {data}; device {device}; budget {a.budget:.0f} s; capture {a.capture}", ""]
    lines += [f"- {r['name']}: {cfg} {' '.join(over)}" for cfg, over, r in results]
    lines += ["", "| run | epoch | epoch s (training, kNN monitor excluded) | "
              "images/s (epoch median) | data-wait | kNN top-1 |", "|" + "---|" * 6]  # fmt: skip
    for _, _, r in results:
        for row in r["rows"]:
            wait = None if row["data_wait"] is None else 100 * row["data_wait"]
            lines.append(f"| {r['name']} | {row['epoch']} | {row['epoch_s']:.1f} | "
                         f"{fmt(row['images_per_s'], '.0f')} | {fmt(wait, '.0f')} % | "
                         f"{fmt(row['knn'], '.2f')} |")  # fmt: skip
    lines += ["", "| run | whole epochs | epoch s (steady, kNN monitor excluded) | "
              "images/s (steady, warm-up excluded) | data-wait % | kNN at the end | "
              "OC-SVM path | wall s | how it ended |", "|" + "---|" * 9]  # fmt: skip
    summary = []
    for _, _, r in results:
        epoch_s, ips, wait, knn, paths = run_summary(r)
        lines.append(f"| {r['name']} | {len(r['rows'])} | {epoch_s} | {ips} | {wait} | {knn} | "
                     f"{paths} | {r['wall_s']:.0f} | {r['stopped']} |")  # fmt: skip
        summary.append(f"| train {r['name']}: whole epochs, epoch s, images/s, data-wait %, kNN "
                       f"at the end, OC-SVM path | {len(r['rows'])}, {epoch_s}, {ips}, {wait}, "
                       f"{knn}, {paths} |")  # fmt: skip
    notes = [f"- {r['name']}: {steady_note(r)}" for _, _, r in results if steady_note(r)]
    lines += ["", *notes] if notes else []
    lines += capture_ratios(results)
    lines += ["", "(steady: medians over the whole epochs after the first, which compiles and "
              f"warms up, reported with at least {STEADY_EPOCHS} of them; data-wait: the share "
              "of a step spent waiting for the loader)", ""]  # fmt: skip
    record_table("Training runs (CIFAR-10 recipes)", lines, a.results, not a.no_record, device)
    if a.summary:
        with open(a.summary, "a") as f:
            f.write("\n".join(summary) + "\n")
    failed = [r["name"] for _, _, r in results if not r["ok"]]
    if failed:
        sys.exit(f"train: failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
