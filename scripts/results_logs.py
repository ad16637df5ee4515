"""The kept logs of docs/results/logs/ carry no path of the machine that measured them.

``machine_paths(run)`` lists every absolute path under a home or work directory (``/home``,
``/root``, ``/work``, ``/tmp``) in every file of a kept run (its four, the optional evaluations,
anything else kept beside them); ``scripts/gen_results.py`` refuses a
log that has one. ``keep(run, dest)`` copies a finished run's four files into the kept logs with
its paths made relative to the run folder: ``out_dir`` becomes ``.``, the checkpoint
``checkpoints/last.pt``, the interpreter of the command its name, and a data root outside the run
the placeholder ``DATA_ROOT``; the host's name stays as recorded (``host`` in the provenance).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

FILES = ("config.yaml", "metrics.jsonl", "provenance.json", "eval/linear_eval.json")
#: kept too where the run has it: the untrained encoder's evaluation (``--random-init``)
OPTIONAL = ("eval/linear_eval_random.json", "eval/oneclass.json")
#: an absolute path under a home or work directory (not a URL's path, not part of a word)
MACHINE_PATH = re.compile(r"(?<![\w.~:/-])/(?:home|root|work|tmp)(?:/[^\s\"',;)]*)?")
DATA_ROOT = "DATA_ROOT"


def machine_paths(run: Path) -> list[str]:
    """``FILE: PATH`` for every machine path in every file kept under ``run`` (the four, the
    optional ones, and any other file put there by hand), in order of the files' names."""
    found = []
    for file in sorted(p for p in run.rglob("*") if p.is_file()):
        name = file.relative_to(run).as_posix()
        text = file.read_text(errors="replace")
        found += [f"{name}: {m.group(0)}" for m in MACHINE_PATH.finditer(text)]
    return found


def _relative(text: str, run: Path, data_root: str | None) -> str:
    """``text`` with the run folder's absolute path made relative to it, the data root replaced
    by the placeholder and an interpreter's absolute path cut to its name."""
    text = text.replace(f"{run}/", "").replace(str(run), ".")
    if data_root:
        text = text.replace(data_root, DATA_ROOT)
    return re.sub(r"(?<![\w.-])/\S*/bin/(python[\d.]*)", r"\1", text)


def keep(run: Path, dest: Path) -> list[str]:
    """Copy run's four files to ``dest`` with relative paths; the machine paths left (none when
    every path lay in the run folder or the data root)."""
    run = run.resolve()
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    root = (cfg.get("data") or {}).get("root")
    data_root = str(Path(root).resolve()) if root and Path(root).is_absolute() else None
    for name in FILES + tuple(n for n in OPTIONAL if (run / n).is_file()):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        text = (run / name).read_text()
        (dest / name).write_text(_relative(text, run, data_root))
    json.loads((dest / "provenance.json").read_text())  # still JSON
    return machine_paths(dest)
