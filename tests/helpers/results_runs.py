"""Kept run folders for the results page's generator (``scripts/gen_results.py``): a fake run
with its records, and the rows of a generated table."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

from pretrain import config
from tests.helpers.paths import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import gen_results  # noqa: E402, F401  (the generator under test, for the tests that import it here)


def rows(page: str) -> list[list[str]]:
    lines = [s for s in page.splitlines() if s.startswith("| `")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", s)[1:-1]] for s in lines]


def fake_run(
    folder: Path, seed: int, knn: float, wall: float, recipe: str = "digits_moco.yaml", *sets: str
) -> None:
    folder.mkdir(parents=True)
    cfg = config.to_dict(config.load(recipe, [f"seed={seed}", *sets]))
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg))
    lines = [{"kind": "epoch", "epoch": e, "global_step": 22 * e} for e in range(1, 31)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    seg = {"command": f"python -m pretrain --cfg {recipe} seed={seed} out_dir=. {' '.join(sets)}",
           "start": "2026-11-27T00:00:00Z"}  # fmt: skip
    prov = {"commit": "abcdef0123", "dirty": False, "cpu_model": "AMD EPYC", "cpu_cores": 2,
            "gpu_model": None, "gpu_count": 0, "world_size": 1, "start": seg["start"],
            "wall_s": wall, "peak_rss_mib": 1200.0, "segments": [seg]}  # fmt: skip
    (folder / "provenance.json").write_text(json.dumps(prov))
    (folder / "eval").mkdir()
    (folder / "eval" / "linear_eval.json").write_text(
        json.dumps({"knn_top1": knn, "linear_top1": 95.0 + seed})
    )
