"""Our MoCo CIFAR-10 kNN curve beside the official colab's (issue 15): a markdown table and a PNG.

Reads each run's ``metrics.jsonl`` (epoch records: ``knn_top1`` and, with
``eval.knn_features: head+backbone``, ``knn_top1_head`` / ``knn_top1_backbone``; step records:
``images_per_s``, ``data_wait_frac``) and the official curve, parsed from the saved output of
facebookresearch/moco ``colab/moco_cifar10_demo.ipynb`` (branch colab-notebook) into
``benchmarks/moco_cifar10_official.csv``.

    python benchmarks/moco_curve.py moco=runs/cifar10_moco [mioc=runs/cifar10_mioc ...] \
        --png docs/moco_cifar10_knn.png

A run may also be a CSV file (``epoch,knn_head,knn_backbone,images_per_s,data_wait,epoch_time_s``,
blank where not recorded): the recorded curve of a run whose directory is gone, as
``benchmarks/curves/*.csv`` keeps those of the README's table.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from pathlib import Path

OFFICIAL = Path(__file__).with_name("moco_cifar10_official.csv")


def official(path: Path = OFFICIAL) -> dict[int, float]:
    """{epoch: kNN top-1 %} of the colab's saved output (epochs 1..200)."""
    with path.open() as f:
        return {int(r["epoch"]): float(r["knn_top1"]) for r in csv.DictReader(f)}


FIELDS = ("knn_head", "knn_backbone", "images_per_s", "data_wait", "epoch_time_s")


def read_csv(path: Path) -> dict[int, dict[str, float]]:
    """{epoch: record} of a recorded curve; ``knn`` is the head's value (blank cells are NaN)."""
    if not path.is_file():
        sys.exit(f"{path} not found: a recorded curve is a CSV file (benchmarks/curves/*.csv)")
    with path.open() as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    missing = {"epoch", *FIELDS} - set(reader.fieldnames or ())
    if missing:
        sys.exit(f"{path}: needs the columns epoch,{','.join(FIELDS)}; missing {sorted(missing)}")
    out = {}
    for r in rows:
        rec = {k: float(r[k]) if r[k].strip() else math.nan for k in FIELDS}
        rec["knn"] = rec["knn_head"]
        out[int(r["epoch"])] = rec
    return out


def write_csv(run: dict[int, dict[str, float]], path: Path) -> None:
    """The curve as ``read_csv`` reads it back (NaN as a blank cell)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["epoch", *FIELDS])
        for e in sorted(run):
            w.writerow([e, *("" if math.isnan(run[e][k]) else f"{run[e][k]:.4g}" for k in FIELDS)])


def read_run(run_dir: Path) -> dict[int, dict[str, float]]:
    """{epoch: {knn_head, knn_backbone, knn, epoch_time_s, images_per_s, data_wait}} of a run.

    Images/s and data-wait are the medians of the epoch's logged steps. A resumed run's repeated
    epochs keep the last record."""
    if run_dir.suffix == ".csv":
        return read_csv(run_dir)
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        sys.exit(
            f"{path} not found: is {run_dir} a run directory (python -m pretrain ... out_dir)?"
        )
    epochs: dict[int, dict[str, float]] = {}
    steps: dict[int, list[tuple[float, float]]] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if r.get("kind") == "step":
            e = math.floor(r["epoch"]) + 1
            steps.setdefault(e, []).append((r.get("images_per_s", math.nan),
                                            r.get("data_wait_frac", math.nan)))  # fmt: skip
        elif r.get("kind") == "epoch" and "knn_top1" in r:
            epochs[r["epoch"]] = {
                "knn": r["knn_top1"],
                "knn_head": r.get("knn_top1_head", math.nan),
                "knn_backbone": r.get("knn_top1_backbone", math.nan),
                "epoch_time_s": r.get("epoch_time_s", math.nan),
            }
    for e, rec in epochs.items():
        s = steps.get(e, [])
        rec["images_per_s"] = statistics.median(v[0] for v in s) if s else math.nan
        rec["data_wait"] = statistics.median(v[1] for v in s) if s else math.nan
    return epochs


def table(runs: dict[str, dict[int, dict[str, float]]], ref: dict[int, float]) -> list[str]:
    names = list(runs)
    head = ["epoch", "official (head)"]
    for n in names:
        head += [f"{n} head", f"{n} - official", f"{n} backbone", f"{n} img/s",
                 f"{n} data-wait", f"{n} epoch min"]  # fmt: skip
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for e in sorted({e for r in runs.values() for e in r}):
        cells = [str(e), f"{ref.get(e, math.nan):.2f}"]
        for n in names:
            r = runs[n].get(e)
            if r is None:
                cells += [""] * 6
                continue
            head_acc = r["knn_head"] if math.isfinite(r["knn_head"]) else r["knn"]
            mark = "" if math.isfinite(r["knn_head"]) else "*"  # the run's own knn_features
            cells += [f"{head_acc:.2f}{mark}", f"{head_acc - ref.get(e, math.nan):+.2f}",
                      f"{r['knn_backbone']:.2f}", f"{r['images_per_s']:.1f}",
                      f"{100 * r['data_wait']:.0f} %", f"{r['epoch_time_s'] / 60:.1f}"]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def plot(runs: dict[str, dict[int, dict[str, float]]], ref: dict[int, float], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    last = max((e for r in runs.values() for e in r), default=10)
    upto = max(last, 10)
    fig, ax = plt.subplots(figsize=(5.5, 3.5), dpi=120)
    xs = [e for e in sorted(ref) if e <= max(upto, 20)]
    ax.plot(xs, [ref[e] for e in xs], "k-o", ms=3, label="official colab (V100)")
    for n, r in runs.items():
        es = sorted(r)
        ys = [r[e]["knn_head"] if math.isfinite(r[e]["knn_head"]) else r[e]["knn"] for e in es]
        feat = "head" if all(math.isfinite(r[e]["knn_head"]) for e in es) else "its knn_features"
        ax.plot(es, ys, "-s", ms=4, label=f"negmine {n} ({feat})")
    ax.set_xlabel("epoch (of the 200-epoch schedule)")
    ax.set_ylabel("kNN top-1 % (k 200, T 0.1)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="NAME=RUN_DIR or NAME=CURVE.csv")
    p.add_argument("--png", default="", help="write the plot here")
    p.add_argument("--official", default=str(OFFICIAL))
    p.add_argument("--save-curves", default="", help="write each run's curve to DIR/NAME.csv")
    a = p.parse_args(argv)
    runs = {}
    for spec in a.runs:
        name, _, path = spec.rpartition("=")
        runs[name or Path(path).name] = read_run(Path(path))
    ref = official(Path(a.official))
    rows = table(runs, ref)
    print("\n".join(rows))
    if any("*" in r for r in rows[2:]):
        print("(* the run logged one kNN feature, eval.knn_features, not the head)")
    if a.save_curves:
        for name, run in runs.items():
            write_csv(run, Path(a.save_curves) / f"{name}.csv")
    if a.png:
        plot(runs, ref, Path(a.png))
        print(f"plot: {a.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
