"""What provenance records of a run's plugins: for the strategy and the loss
it trains with, when they are not this package's own, the plugin's distribution name and
version (an installed package's entry point) or the sha256 of its file (a ``plugins:`` file, or
any class defined outside the package), so a run names the exact plugin code it ran."""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
from pathlib import Path
from typing import Any

PACKAGES = {"pretrain", "negatives", "negmine_core", "linear_eval", "slurm"}
ROOT = Path(__file__).resolve().parents[2]  # where this package's own modules live


def record(kind: str, name: str, cls: type, group: str) -> dict[str, Any] | None:
    """``{"kind", "name", "class", "dist", "version"}`` for an installed plugin's entry point,
    ``{"kind", "name", "class", "file", "sha256"}`` for a class from a file outside the package,
    or None for a class of this package."""
    if cls.__module__.split(".")[0] in PACKAGES:
        return None
    out: dict[str, Any] = {
        "kind": kind,
        "name": name,
        "class": f"{cls.__module__}.{cls.__qualname__}",
    }
    for ep in importlib.metadata.entry_points(group=group):
        dist = getattr(ep, "dist", None)
        if ep.name == name and dist is not None:
            return {**out, "dist": dist.name, "version": dist.version}
    try:
        path = Path(inspect.getsourcefile(cls) or "")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except (OSError, TypeError):
        return {**out, "file": None, "sha256": None}
    return {**out, "file": str(path.resolve()), "sha256": digest}


def cell(records: list[dict[str, Any]] | None) -> str:
    """One short table cell: ``negmine-example-plugin 0.1.0`` or ``mine.py sha256:1a2b3c4d``."""
    if not records:
        return "-"
    parts = []
    for r in records:
        if r.get("dist"):
            parts.append(f"{r['dist']} {r['version']}")
        else:
            name = Path(r.get("file") or "?").name
            parts.append(f"{name} sha256:{(r.get('sha256') or '?')[:12]}")
    return ", ".join(parts)
