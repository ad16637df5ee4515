"""Your own method over seeds on digits, then one table: ``python -m pretrain`` and
``python -m linear_eval`` (kNN + the SGD probe, the results table's columns) per seed, then
``python -m linear_eval table`` of the runs (plain MoCo beside them with ``--baseline``).

    python benchmarks/seeds.py batch_mix                          # an installed plugin's strategy
    python benchmarks/seeds.py mine --plugins mine.py --seeds 0 1 2   # a plugin file's method
    python benchmarks/seeds.py sincere --cfg digits_supcon.yaml   # a built-in loss on its recipe
    python benchmarks/seeds.py mioc --baseline --dry-run          # print the commands only

NAME is a negative strategy (``negatives.name``) or a loss (``loss.name``): built in, installed
by an entry point, or defined in a ``--plugins`` file (written into each run's config as
``plugins: [...]``, so that evaluation and resume find it). Which one it is, is found by loading
the config with each (the config's own check: an unknown name exits 2 listing the installed
ones). Runs go to ``OUT/NAME_sSEED`` (default ``runs/seeds``); a run whose evaluation exists is
skipped, an unfinished one resumes (``python -m pretrain`` resumes from ``out_dir``). Extra
``dotted.key=value`` overrides follow ``--``. Exit status: 0 done, 1 a run failed, 2 bad
arguments.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pretrain import config  # noqa: E402
from pretrain.errors import ConfigError  # noqa: E402


def plugin_override(files: list[str]) -> list[str]:
    """``plugins=[...]`` for the config, absolute paths (each run's config names them)."""
    if not files:
        return []
    return ["plugins=[" + ", ".join(str(Path(f).resolve()) for f in files) + "]"]


def key_of(name: str, cfg: str, extra: list[str]) -> str:
    """``negatives.name`` or ``loss.name``: the key that accepts ``name`` in ``cfg``; ConfigError
    with both reasons where neither does."""
    errors = []
    for key in ("negatives.name", "loss.name"):
        try:
            config.load(cfg, [f"{key}={name}", *extra])
            return key
        except ConfigError as e:
            errors.append(str(e))
    raise ConfigError(f"{name!r} is neither a strategy nor a loss here: {'; '.join(errors)}")


def commands(a: argparse.Namespace) -> list[list[str]]:
    """Each seed's two commands (a finished run's none), then the table's."""
    extra = plugin_override(a.plugins) + a.overrides
    key = key_of(a.name, a.cfg, extra)
    out: list[list[str]] = []
    runs = []
    methods = [(a.name, [f"{key}={a.name}"])] + ([("moco", [])] if a.baseline else [])
    for label, chosen in methods:
        for seed in a.seeds:
            run = Path(a.out) / f"{label}_s{seed}"
            runs.append(str(run))
            if (run / "eval" / "linear_eval.json").is_file():
                continue
            over = [*chosen, *extra, f"seed={seed}", f"out_dir={run}", "train.progress_bar=false"]
            if a.epochs is not None:
                over.append(f"train.epochs={a.epochs}")
            out.append([sys.executable, "-m", "pretrain", "--cfg", a.cfg, *over])
            ckpt = f"{run}/checkpoints/last.pt"
            out.append([sys.executable, "-m", "linear_eval", "--ckpt", ckpt])
    table = [sys.executable, "-m", "linear_eval", "table", *runs, "--out", f"{a.out}/table"]
    if a.baseline:
        table += ["--baseline", str(Path(a.out) / f"moco_s{a.seeds[0]}")]
    return out + [table]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("name", help="a strategy or loss name (built-in, installed, or in --plugins)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--cfg", default="digits_moco.yaml", help="the recipe (default: digits MoCo)")
    p.add_argument("--plugins", nargs="+", default=[], metavar="FILE", help="plugin files")
    p.add_argument("--epochs", type=int, default=None, help="train.epochs (default: the recipe's)")
    p.add_argument("--out", default="runs/seeds", help="the runs' folder (default: runs/seeds)")
    p.add_argument("--baseline", action="store_true", help="plain MoCo on the same seeds too")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.add_argument("overrides", nargs="*", help="dotted.key=value overrides (after --)")
    a = p.parse_args(argv)
    try:
        todo = commands(a)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for cmd in todo:
        print(shlex.join(cmd), flush=True)
        if not a.dry_run and subprocess.run(cmd).returncode != 0:
            print(f"error: failed: {shlex.join(cmd)}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
