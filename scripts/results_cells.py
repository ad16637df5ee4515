"""What one row of the results page says, from its runs' kept logs (``scripts/gen_results.py``):
the recipe and its variant from the command, the wall time and step speed, the peak memory, and
the notes on what a run did (MiOC's warm-up and inlier share, the thread count)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pretrain.runtime import provenance  # noqa: E402

#: Command-line keys that do not change what a run measures: left out of a row's variant.
NOT_VARIANT = ("seed", "out_dir", "train.threads", "train.progress_bar", "data.root",
               "train.log_every", "data.name", "data.resident")  # fmt: skip
#: Of those, the ones that say how the data was read: noted under the row (``data_note``).
DATA_KEYS = ("data.name", "data.resident")


def recipe_of(prov: dict[str, Any]) -> str:
    command = prov["segments"][0].get("command", "")
    m = re.search(r"--cfg[ =](\S+)", command)
    if not m:
        raise ValueError(f"no --cfg in the provenance's command: {command!r}")
    return Path(m.group(1)).name


def variant_of(prov: dict[str, Any]) -> str:
    """The run's ``key=value`` overrides that change what it measures ("" for the recipe as
    shipped), sorted: runs of one recipe with different overrides make different rows."""
    words = prov["segments"][0].get("command", "").split()
    return " ".join(sorted(w for w in words if "=" in w and not w.startswith("-")
                           and w.split("=", 1)[0] not in NOT_VARIANT))  # fmt: skip


def step_speed(runs: list[dict[str, Any]]) -> str:
    """The median step time and images/s over every logged step of the runs ("" if none)."""
    times = [s["step_time_s"] for r in runs for s in r["steps"] if "step_time_s" in s]
    rates = [s["images_per_s"] for r in runs for s in r["steps"] if "images_per_s" in s]
    if not times or not rates:
        return ""
    return f"; median step {np.median(times):.2f} s, {np.median(rates):.1f} images/s"


def mioc_note(runs: list[dict[str, Any]]) -> list[str]:
    """What a MiOC run did: its warm-up epochs and the share of the queue in O after them."""
    kwargs = runs[0]["cfg"].get("negatives", {})
    if kwargs.get("name") != "mioc":
        return []
    warmup = (kwargs.get("kwargs") or {}).get("warmup_epochs", "the default")
    warmup = f"{warmup:g}" if isinstance(warmup, (int, float)) else warmup
    if (kwargs.get("kwargs") or {}).get("selection") == "queue":
        return [f"MiOC's ablation, O = the whole queue (no OC-SVM fitted): {warmup} warm-up "
                "epochs, then S_o drawn from the whole queue as S_n is; the same sizes, seeds "
                "and logit count as MiOC"]  # fmt: skip
    shares = [s["neg_inlier_fraction"] for r in runs for s in r["steps"]
              if "neg_inlier_fraction" in s]  # fmt: skip
    share = (f"the share of the queue in O over the {len(shares)} logged steps after it: median "
             f"{np.median(shares):.0%} ({min(shares):.0%} to {max(shares):.0%})"
             if shares else "no logged step after it")  # fmt: skip
    return [f"MiOC: {warmup} warm-up epochs (no OC-SVM fitted, query-queue mixing only); {share}"]


def threads_note(runs: list[dict[str, Any]]) -> list[str]:
    """The runs' ``train.threads`` where the command set it (it changes the step time, not what
    is measured: it is no variant)."""
    words = {w for r in runs for w in r["prov"]["segments"][0].get("command", "").split()}
    threads = sorted(w.split("=", 1)[1] for w in words if w.startswith("train.threads="))
    return [f"train.threads={'/'.join(threads)} (torch threads per run)"] if threads else []


def data_note(runs: list[dict[str, Any]]) -> list[str]:
    """How the runs read their data where the command set it (``data.name=imagefolder``: the
    dataset's image files, e.g. the CIFAR-10 JPEGs; ``data.resident``): no variant."""
    words = {w for r in runs for w in r["prov"]["segments"][0].get("command", "").split()}
    found = sorted(w for w in words if w.split("=", 1)[0] in DATA_KEYS)
    return [f"data read with {' '.join(found)}"] if found else []


def memory(prov: dict[str, Any]) -> str:
    if prov.get("peak_gpu_mib"):
        return f"{prov['peak_gpu_mib'] / 1024:.1f} GiB GPU"
    if prov.get("peak_rss_mib"):
        return f"{prov['peak_rss_mib'] / 1024:.1f} GiB RSS"
    return "-"


def wall_cell(walls: list[float]) -> str:
    """One run's wall time, or the mean per run and the range over the seeds."""
    if len(walls) == 1:
        return provenance.duration(walls[0])
    d = provenance.duration
    return f"{d(float(np.mean(walls)))} per run ({d(min(walls))} to {d(max(walls))})"


def detection_note(runs: list[dict[str, Any]]) -> list[str]:
    """The one-class detection AUROC of s_con over the seeds, where every run kept
    ``eval/oneclass.json`` (``python -m linear_eval ood --ckpt RUN/checkpoints/last.pt
    --detectors s_con --k K``): the figure a one-class recipe (FIRM's) is judged by."""
    records = [r.get("oneclass") for r in runs]
    if not all(rec and "s_con" in rec["detectors"] for rec in records):
        return []
    aurocs = [rec["detectors"]["s_con"]["mean"]["auroc"] for rec in records]
    sets = "; ".join(", ".join(map(str, s)) for s in records[0]["normal_sets"])
    spread = f" ± {np.std(aurocs, ddof=1):.2f}" if len(aurocs) > 1 else " (1 seed)"
    k = records[0]["settings"]["k"]
    command = f"python -m linear_eval ood --ckpt RUN/checkpoints/last.pt --detectors s_con --k {k}"
    return [f"one-class detection, in-distribution class {sets} against the other classes' test "
            f"images: s_con (k {k}) AUROC {np.mean(aurocs):.2f}{spread} (`{command}`)"]  # fmt: skip
