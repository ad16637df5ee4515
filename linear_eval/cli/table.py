"""``python -m linear_eval table RUN_DIR...``: one table that compares runs.

    python -m linear_eval table runs/digits_* --baseline runs/digits_moco_s0 --out results/digits

Reads each run's resolved ``config.yaml``, its ``eval/*.json`` and the training diagnostics of its
last epoch (``metrics.jsonl``: the effective number of negatives and the false-negative fraction
every strategy logs), groups the runs by config (everything but ``seed`` and the keys that
may change on a resume), by the data they were evaluated on (the checkpoint's training set and
the test set, by the digests each eval JSON records) and by the evaluation settings (the kNN's k
and T, the linear probe), and writes one row per group as markdown (``OUT.md``) and CSV
(``OUT.csv``): the config keys that differ between groups, then for every metric the mean ± std
over seeds (one seed: its value and "(1 seed)": no spread measured), the number of seeds, and the
bootstrap 95 % interval of the seed-averaged accuracy over the test set (the per-image results
that ``python -m linear_eval --ckpt`` stores; "-" for evaluations made before it stored them).
With ``--baseline RUN`` each row also gets the paired bootstrap difference to the baseline's group
(the same resampled test images for both sides, Efron & Tibshirani 1993 §13.3; significant when its
interval excludes 0), for rows evaluated on the baseline's test set only. A RUN_DIR may be a glob,
or a folder whose ``sweep_*`` subfolders (``python -m slurm --sweep``) or run subfolders hold the
runs. Runs that are unfinished or have no evaluation are listed under the table, with the reason,
never dropped silently; so is a second run of a seed already in its row (a copied run folder),
which would count one seed twice. The last two columns are the mean wall time of the group's runs
and their hardware, from each run's ``provenance.json`` (:mod:`pretrain.runtime.provenance`; "-"
for runs made before it was recorded).
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from linear_eval.records.runs import Run, read_runs
from pretrain.runtime import plugin_provenance, provenance, run_folder

#: Config keys that do not define the experiment (paths, resources, resumable settings).
IGNORED = (
    "out_dir",
    "seed",
    "data.root",
    "data.num_workers",
    "train.threads",
    "train.log_every",
    "train.progress_bar",
    "train.ckpt_every",
    "train.keep_every",
    "train.max_requeues",
    "train.dist_timeout_min",
    "train.compile",
    "data.skip_bad_images",
    "eval.",
)
N_RESAMPLES = 1000


def notes(runs: list[Run], baseline: bool) -> list[str]:
    """What the columns mean where two commands could differ: the probe behind each linear
    metric and the kNN setting behind each kNN metric (every distinct one, so mixed probes and
    mixed k or T show), the runs that ``train.max_steps`` stopped short of their schedule, and
    the sign of the difference."""
    out = []
    for key in sorted({k for r in runs for k in r.probes}):
        probes = sorted({r.probes[key] for r in runs if key in r.probes})
        mixed = " (the runs differ: not comparable)" if len(probes) > 1 else ""
        out.append(f"{key}: {'; '.join(probes)}{mixed}")
    out += [f"`{r.path}`: {r.stopped}" for r in runs if r.stopped]
    if baseline:
        out.append(
            "vs baseline: run - baseline (as compare's B - A), paired bootstrap 95% interval "
            "over the test images; * when it excludes 0"
        )
    return out


def probe_header(runs: list[Run]) -> str:
    """The table's first line: the linear probe behind ``linear_top1`` (that of the default
    command, ``python -m linear_eval --ckpt``, an SGD probe; ``compare`` names its own the same
    way), so that two commands' numbers are not compared across probes unknowingly."""
    probes = sorted({r.probes["linear_*"] for r in runs if "linear_*" in r.probes})
    if not probes:
        return "linear probe: none (no run has the default command's linear_top1)"
    mixed = " (the runs differ: not comparable)" if len(probes) > 1 else ""
    return f"linear probe: {'; '.join(probes)}{mixed}"


def ignored(key: str) -> bool:
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in IGNORED)


def group(runs: list[Run]) -> tuple[list[list[Run]], list[str]]:
    """Runs grouped by config (ignored keys aside), and the keys that differ between groups."""
    keys = sorted({k for r in runs for k in r.config if not ignored(k)})
    groups: dict[tuple, list[Run]] = {}
    for r in runs:
        groups.setdefault(tuple(repr(r.config.get(k)) for k in keys), []).append(r)
    rows = list(groups.values())
    differ = [k for i, k in enumerate(keys) if len({sig[i] for sig in groups}) > 1]
    return rows, differ


def seed_mean_bootstrap(members: list[np.ndarray], idx: np.ndarray) -> np.ndarray:
    """Per resample (rows of idx), the seed-averaged accuracy (%) of the runs' correctness."""
    return np.mean([100.0 * m[idx].mean(axis=1) for m in members], axis=0)


def interval(stats: np.ndarray) -> tuple[float, float]:
    low, high = np.quantile(stats, [0.025, 0.975])
    return float(low), float(high)


def label(members: list[Run]) -> str:
    """The group's name: its run folders without a seed suffix (``_s0``, ``_seed1``), joined."""
    names = {re.sub(r"_(s|seed)\d+$", "", r.path.name) for r in members}
    return ", ".join(sorted(names))


def build(
    runs: list[Run], baseline: list[Run] | None, seed: int = 0, only: list[str] | None = None
) -> tuple[list[str], list[list[str]]]:
    rows, differ = group(runs)
    metrics = sorted({m for r in runs for m in r.metrics})
    if only:
        missing = [m for m in only if m not in metrics]
        if missing:
            raise ValueError(
                f"--metrics {', '.join(missing)} not found; present: {', '.join(metrics)}"
            )
        metrics = only
    header = ["config", *differ, "seeds"]
    resampled = {m for r in runs for m in r.per_sample}  # metrics with per-image results
    for m in metrics:
        header.append(m)
        if m in resampled:
            header += [f"{m} 95% CI"] + ([f"{m} vs baseline"] if baseline else [])
    idx = resampler(seed)
    table = []
    for members in rows:
        line = [
            label(members),
            *[str(members[0].config.get(k, "")) for k in differ],
            str(len(members)),
        ]
        for m in metrics:
            line.append(mean_std([r.metrics[m] for r in members if m in r.metrics], len(members)))
            if m not in resampled:  # a training diagnostic: no test images to resample
                continue
            per = [r.per_sample[m] for r in members if m in r.per_sample]
            per = per if len(per) == len(members) else []  # a seed without per-image results
            line.append(ci_cell(per, idx))
            if baseline:
                base = [r.per_sample[m] for r in baseline if m in r.per_sample]
                line.append(diff_cell(per, base, idx, same_test_set(members, baseline)))
        table.append([*line, *run_cost(members), plugins_cell(members)])
    if all(row[-1] == "-" for row in table):  # no plugins: the column is left out
        return [*header, "wall time", "hardware"], [row[:-1] for row in table]
    return [*header, "wall time", "hardware", "plugins"], table


def resampler(seed: int) -> Callable[[int], np.ndarray]:
    """Bootstrap indices (N_RESAMPLES, n) for a test set of n images, the same for every group of
    that size (so a paired difference resamples the same images on both sides)."""
    drawn: dict[int, np.ndarray] = {}

    def idx(n: int) -> np.ndarray:
        if n not in drawn:
            drawn[n] = np.random.default_rng(seed).integers(0, n, size=(N_RESAMPLES, n))
        return drawn[n]

    return idx


def same_test_set(members: list[Run], baseline: list[Run]) -> bool:
    """Whether a group was evaluated on the baseline's test set (its recorded digest; runs
    evaluated before it was recorded count as one set when their sizes agree)."""
    return members[0].config.get("test_set") == baseline[0].config.get("test_set")


def ci_cell(per: list[np.ndarray], idx: Callable[[int], np.ndarray]) -> str:
    """The bootstrap interval of the seed-averaged accuracy ("-": no per-image results)."""
    if not per or len({len(p) for p in per}) != 1:
        return "-"
    low, high = interval(seed_mean_bootstrap(per, idx(len(per[0]))))
    return f"[{low:.2f}, {high:.2f}]"


def diff_cell(
    per: list[np.ndarray], base: list[np.ndarray], idx: Callable[[int], np.ndarray], same: bool
) -> str:
    """Run - baseline, paired over the test images: only on one test set (``same``, and equal
    sizes), where pairing the i-th results pairs one image."""
    if not per or not base:
        return "-"
    sizes = {len(p) for p in per + base}
    if not same or len(sizes) != 1:
        return "not paired: another test set"
    i = idx(sizes.pop())
    d = seed_mean_bootstrap(per, i) - seed_mean_bootstrap(base, i)
    point = np.mean([100 * p.mean() for p in per]) - np.mean([100 * b.mean() for b in base])
    low, high = interval(d)
    mark = " *" if low > 0 or high < 0 else ""
    return f"{point:+.2f} [{low:+.2f}, {high:+.2f}]{mark}"


def mean_std(values: list[float], members: int) -> str:
    """``mean ± std`` over seeds; one value says that no spread was measured ("-": none)."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f} " + ("(1 seed)" if members == 1 else f"(1 of {members} seeds)")
    return f"{np.mean(values):.2f} ± {np.std(values, ddof=1):.2f}" + (
        f" (n={len(values)})" if len(values) != members else ""
    )


def plugins_cell(members: list[Run]) -> str:
    """The plugins the group's runs trained with (``provenance.json``'s records: distribution and
    version, or a file's sha256), "-" for none."""
    cells = {plugin_provenance.cell((r.provenance or {}).get("plugins")) for r in members}
    cells.discard("-")
    return "; ".join(sorted(cells)) or "-"


def run_cost(members: list[Run]) -> list[str]:
    """The group's wall time (mean over its runs' ``provenance.json``) and hardware ("-": runs
    made before provenance was recorded)."""
    walls = [r.provenance["wall_s"] for r in members if r.provenance and r.provenance.get("wall_s")]
    wall = provenance.duration(float(np.mean(walls))) if walls else "-"
    if walls and len(walls) != len(members):
        wall += f" (n={len(walls)})"
    hardware = sorted({provenance.hardware(r.provenance) for r in members})
    return [wall, "; ".join(hardware)]


def markdown(
    header: list[str],
    table: list[list[str]],
    left_out: list[tuple[Path, str]],
    legend: Sequence[str] = (),
) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in table]
    if legend:
        out += [""] + [f"- {n}" for n in legend]
    if left_out:
        out += ["", "Not in the table:", ""]
        out += [f"- `{p}`: {why}" for p, why in left_out]
    return "\n".join(out) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``table``'s arguments (its subparser in :func:`linear_eval.cli.main.parser`)."""
    p.description = __doc__.split("\n")[0]
    p.add_argument("runs", nargs="+", help="run folders, globs, or folders of runs (sweep_*)")
    p.add_argument("--baseline", default=None, help="a run folder: its group is the baseline")
    p.add_argument("--out", default=None, help="write OUT.md and OUT.csv (default: print only)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--metrics", default="", help="comma list of metrics (default: every one)")


def repeated_seeds(
    runs: list[Run], baseline: str | None = None
) -> tuple[list[Run], list[tuple[Path, str]]]:
    """The runs with one run per seed in each group, and every other run of a seed already in its
    group with why it is left out: a run folder and its copy are one seed, not two (a spread of
    0.00 over "2 seeds"). Kept: the ``--baseline`` folder, else the first folder by name."""
    rows, _ = group(runs)
    base = Path(baseline).resolve() if baseline else None
    dropped: dict[int, tuple[Path, str]] = {}
    for members in rows:
        first: dict[str, Run] = {}
        for r in sorted(members, key=lambda r: (r.path.resolve() != base, str(r.path))):
            seed = r.config.get("seed")
            if repr(seed) not in first:
                first[repr(seed)] = r
                continue
            dropped[id(r)] = (
                r.path,
                f"seed {seed} repeats that of {first[repr(seed)].path} in its row (one config, "
                "data and evaluation; a copy of that run?): left out, so one seed is not counted "
                "twice",
            )
    return [r for r in runs if id(r) not in dropped], list(dropped.values())


def baseline_group(runs: list[Run], path: str | None) -> list[Run] | None:
    """The group holding the run folder ``path`` (None without ``--baseline``)."""
    if not path:
        return None
    rows, _ = group(runs)
    base = Path(path).resolve()
    found = next((g for g in rows if any(r.path.resolve() == base for r in g)), None)
    if found is None:
        raise ValueError(f"--baseline {path} is not among the finished, evaluated runs")
    return found


def write(out: Path, text: str, header: list[str], rows: list[list[str]], left_out: list) -> None:
    f = io.StringIO(newline="")
    writer = csv.writer(f)
    writer.writerow(header)
    writer.writerows(rows)
    for p, why in left_out:
        writer.writerow([f"(not in the table) {p}", why])
    run_folder.write_text(out.with_suffix(".md"), text)
    run_folder.write_text(out.with_suffix(".csv"), f.getvalue())
    print(f"wrote {out.with_suffix('.md')} and {out.with_suffix('.csv')}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """``table``: print the table (and write OUT.md, OUT.csv). Unreadable runs raise ValueError,
    OSError or yaml.YAMLError (exit 2 in :func:`linear_eval.cli.main.main`)."""
    runs, left_out = read_runs(args.runs)
    runs, repeats = repeated_seeds(runs, args.baseline)
    left_out += repeats
    baseline = baseline_group(runs, args.baseline)
    only = [m for m in args.metrics.split(",") if m]
    header, rows = build(runs, baseline, args.seed, only)
    text = probe_header(runs) + "\n\n"
    text += markdown(header, rows, left_out, notes(runs, baseline is not None))
    print(text)
    if args.out:
        write(Path(args.out), text, header, rows, left_out)
    return 0
