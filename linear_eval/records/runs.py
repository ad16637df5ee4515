"""The run folders that ``python -m linear_eval table`` reads (:mod:`linear_eval.cli.table`): each
run's resolved ``config.yaml`` (flattened), whether it finished (the steps it reached against its
schedule and ``train.max_steps``), its ``eval/*.json`` metrics, per-image results, probes and the
data they were made on, and its last epoch's training diagnostics; or why it is left out."""

from __future__ import annotations

import glob
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from linear_eval.records import training
from pretrain.data import identity
from pretrain.runtime import provenance, run_folder

#: Numbers in eval JSONs that are bookkeeping, not metrics.
NOT_METRICS = {"epoch", "global_step", "train_size", "test_size", "seed"}
DIAGNOSTICS = ("false_negative_fraction", "effective_negatives")
#: The mark of an image folder's digest from before it covered the files' sizes.
OLD_DIGEST = "paths and labels only"


@dataclass
class Run:
    path: Path
    config: dict[str, Any]
    metrics: dict[str, float] = field(default_factory=dict)
    per_sample: dict[str, np.ndarray] = field(default_factory=dict)
    provenance: dict[str, Any] | None = None  # RUN/provenance.json (None: not recorded)
    probes: dict[str, str] = field(default_factory=dict)  # metric prefix -> the linear probe
    stopped: str = ""  # why it ran fewer steps than its schedule's (train.max_steps), or ""


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v and k != "kwargs":
            out.update(flatten(v, f"{key}."))
        else:
            out[key] = json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v
    return out


def find_runs(patterns: list[str]) -> list[Path]:
    """Run folders (holding config.yaml) from paths, globs and sweep / parent folders."""
    found: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) or [pattern]
        for m in map(Path, matches):
            if (m / "config.yaml").exists():
                found.append(m)
            elif m.is_dir():
                found += sorted(p.parent for p in m.glob("*/config.yaml"))
            else:
                raise ValueError(f"{m}: no such run folder (expected RUN/config.yaml)")
    if not found:
        raise ValueError(f"no run folders (with config.yaml) in {' '.join(patterns)}")
    return list(dict.fromkeys(found))


def total_steps(path: Path) -> int | None:
    derived = path / "derived.yaml"
    if not derived.exists():
        return None
    info = yaml.safe_load(derived.read_text()) or {}
    return info.get("total_steps")


def steps_done(records: list[dict[str, Any]], prov: dict[str, Any] | None, evals: list) -> int:
    """The last global step the run reached: the most of its logged records' (logged every
    ``train.log_every`` steps and at each epoch's end, so a stop between two logs is not
    there), its provenance's segments' ``end_step`` and the evaluated checkpoints'."""
    steps = [r.get("global_step", 0) for r in records]
    steps += [s.get("end_step") or 0 for s in ((prov or {}).get("segments") or [])]
    steps += [e.get("global_step") or 0 for e in evals]
    return max((s for s in steps if isinstance(s, int)), default=0)


def read_run(path: Path) -> tuple[Run | None, str]:
    """The run, or None and why it is left out of the table. A run stopped by
    ``train.max_steps`` short of its schedule is in (``train.max_steps`` is part of its config),
    with a note saying so (:attr:`Run.stopped`)."""
    cfg = yaml.safe_load((path / "config.yaml").read_text()) or {}
    prov = provenance.read(path)
    bad = provenance.damaged(prov)
    if bad:
        return None, (
            f"{path / provenance.FILE}: {bad}; fix the key, or move the file away to list the run "
            "without its wall time and hardware"
        )
    run = Run(path, flatten(cfg), provenance=prov)
    records = training.log_lines(path / "metrics.jsonl")
    epochs = [r for r in records if r.get("kind") == "epoch"]
    evals = sorted((path / "eval").glob("*.json"))
    loaded = [run_folder.read_json(file) for file in evals]
    for file, data in zip(evals, loaded):
        if not isinstance(data, dict):
            raise ValueError(f"{file} holds no result (a JSON object of keys); move it away")
    done_steps = steps_done(records, run.provenance, [d for d in loaded if isinstance(d, dict)])
    total = want = total_steps(path)
    max_steps = cfg.get("train", {}).get("max_steps", 0) or 0
    if max_steps:
        want = min(want, max_steps) if want else max_steps
    if want is not None and done_steps < want:
        cut = f" (train.max_steps={max_steps}; the schedule has {total})" if total else ""
        cut = cut if want != total else ""
        return None, f"unfinished: step {done_steps} of {want}{cut}"
    if total is not None and want != total:  # reached train.max_steps, short of the schedule
        run.stopped = (
            f"stopped by train.max_steps at step {done_steps} of {total} (its schedule's): in "
            "the row of its train.max_steps, apart from runs of the whole schedule"
        )
    if not evals:
        return (
            None,
            "no evaluation (eval/*.json): run python -m linear_eval --ckpt RUN/checkpoints/last.pt",
        )
    found = add_evaluations(run, evals, loaded)
    run.config |= {k: "; ".join(sorted(v)) for k, v in found.items()}
    run.config |= {f"{k} (evaluated)": v for k, v in run.probes.items()}
    if epochs:  # the last epoch's training diagnostics (mean over its logged steps)
        last = epochs[-1]["epoch"]
        steps = [r for r in records if r.get("kind") == "step" and r.get("epoch", 0) > last - 1]
        for name in DIAGNOSTICS:
            values = [v for r in steps for k, v in r.items() if k.endswith(name)]
            if values:
                run.metrics[f"train_{name}"] = float(np.mean(values))
    return run, ""


def add_evaluations(
    run: Run, evals: list[Path], loaded: list[dict[str, Any]]
) -> dict[str, set[str]]:
    """The eval JSONs' metrics, probes and per-sample bits into ``run``; what the evaluations were
    made on (group keys)."""
    found: dict[str, set[str]] = {}  # what the evaluations were made on, as group keys
    for file, data in zip(evals, loaded):
        prefix = "" if file.stem == "linear_eval" else f"{file.stem}:"
        for key, value in data.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if key not in NOT_METRICS:
                    run.metrics[prefix + key] = float(value)
        probe = probe_of(file.stem, data)
        if probe:
            run.probes[f"{prefix}linear_*" if not prefix else f"{prefix}*"] = probe
        knn = knn_of(file.stem, data)
        if knn:
            run.probes[f"{prefix}knn_*"] = knn
        for key, value in data_of(data).items():
            found.setdefault(key, set()).add(value)
        for key, bits in (data.get("per_sample") or {}).items():
            run.per_sample[prefix + key] = np.frombuffer(bits.encode(), np.uint8) == ord("1")
    return found


def probe_of(stem: str, data: dict[str, Any]) -> str:
    """The linear probe behind an eval JSON's linear numbers ("" when it has none)."""
    lin = data.get("linear")
    if stem.startswith("linear_eval") and isinstance(lin, dict) and "epochs" in lin:
        return (
            f"SGD probe of python -m linear_eval --ckpt ({lin.get('mode')}, {lin['epochs']} "
            f"epochs, lr {lin.get('lr')}, milestones {lin.get('milestones')})"
        )
    protocol = data.get("protocol")
    if stem.startswith("linear") and isinstance(protocol, dict) and "name" in protocol:
        return f"{protocol['name']} probe of python -m linear_eval linear"
    return ""


def knn_of(stem: str, data: dict[str, Any]) -> str:
    """The kNN setting behind an eval JSON's kNN numbers ("" when it names none)."""
    knn = data.get("knn")
    if stem.startswith("linear_eval") and isinstance(knn, dict) and "k" in knn:
        return f"kNN of python -m linear_eval --ckpt (k {knn['k']}, T {knn.get('temperature')})"
    return ""


def data_of(data: dict[str, Any]) -> dict[str, str]:
    """The data an eval JSON was made on: the checkpoint's training set and the test set, each as
    its size and the start of its digest (:mod:`pretrain.data.identity`); absent from evaluations
    made before they were recorded. An image folder's digest recorded by older code covers its
    paths and labels only, not the files' sizes: it is marked so, and never groups with a newer
    record (whose digest differs even for the same files)."""
    out = {}
    for name in ("train_set", "test_set"):
        ident = data.get(name)
        if isinstance(ident, dict) and "sha256" in ident:
            old = f" ({OLD_DIGEST})" if identity.legacy_files(ident) else ""
            out[name] = f"{ident.get('size')} images, sha256 {str(ident['sha256'])[:12]}{old}"
    return out


def read_runs(patterns: list[str]) -> tuple[list[Run], list[tuple[Path, str]]]:
    """The finished, evaluated runs, and the others with the reason they are left out."""
    runs, left_out = [], []
    for path in find_runs(patterns):
        run, why = read_run(path)
        (runs.append(run) if run else left_out.append((path, why)))
    if not runs:
        raise ValueError(
            "no finished, evaluated run: " + "; ".join(f"{p}: {w}" for p, w in left_out)
        )
    return runs, left_out
