"""The config's ``plugins`` key: strategies and losses of one's own, loaded before the config is
checked (a Python file or ``module[:Class]``; an installed package's come through its entry
points, :mod:`negmine_core.registry`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pretrain.errors import ConfigError


def load_plugins(
    cfg: Any, source: str, missing_ok: bool = False, base: Path | None = None
) -> tuple[Any, list[str]]:
    """Import the config's ``plugins`` (files as absolute paths from here on; a relative one
    against ``base``, the config file's folder, first, then the working directory); a plugin that
    cannot be loaded is a :class:`ConfigError` naming it, or with ``missing_ok`` a note."""
    from negmine_core.registry import PluginError, import_plugin

    stored, notes = [], []
    for spec in cfg.plugins:
        try:
            spec, objects = import_plugin(spec, base)
            for obj in objects:
                check_registered(spec, obj)
        except PluginError as e:
            if not missing_ok:
                raise ConfigError(f"config key 'plugins' in {source}: {e}") from None
            notes.append(str(e))
        stored.append(spec)
    return dataclasses.replace(cfg, plugins=stored), notes


def check_registered(spec: str, obj: Any) -> None:
    """A ``module:Class`` plugin must name a registered strategy or loss class."""
    import negatives
    from negmine_core.registry import PluginError
    from pretrain import losses

    for registry in (negatives.strategies, losses.registry):
        if any(not registry.problem(n) and registry.get(n) is obj for n in registry.names()):
            return
    raise PluginError(
        f"plugin {spec!r} is not a registered strategy or loss: decorate the class with "
        "@negatives.register('name') or @pretrain.losses.register('name')"
    )


def missing_plugins(cfg: Any, records: list[dict[str, Any]] | None = None) -> list[str]:
    """The loss and strategy names of ``cfg`` that are not registered here, with why; ``records``:
    the run's provenance records of its plugins, naming the distribution or file it used."""
    import negatives
    from pretrain import losses

    out = []
    for kind, name, registry in (
        ("negative strategy", cfg.negatives.name, negatives.strategies),
        ("loss", cfg.loss.name, losses.registry),
    ):
        if name not in registry or registry.problem(name):
            where = recorded_as(kind, name, records)
            problem = registry.problem(name)
            if problem:  # claimed twice (or broken): which one the run used is kept
                out.append(problem + (f" (the run used {where})" if where else ""))
            else:
                used = f"; the run used {where}" if where else ""
                out.append(f"{kind} {name!r} (a plugin not installed here{used})")
    return out


def recorded_as(kind: str, name: str, records: Any) -> str:
    """Where a run's provenance says its plugin ``name`` of ``kind`` (``loss`` or ``negative
    strategy``) came from: ``negmine-example-plugin 0.1.0`` or ``mine.py sha256:1a2b3c4d5e6f``;
    '' when no record names it (a built-in, a run from before plugins were recorded)."""
    from pretrain.runtime import plugin_provenance

    short = "loss" if kind == "loss" else "strategy"
    found = [
        r
        for r in (records if isinstance(records, list) else [])
        if isinstance(r, dict) and r.get("kind") == short and r.get("name") == name
    ]
    return plugin_provenance.cell(found[:1]) if found else ""


def run_records(out_dir: str) -> list[dict[str, Any]]:
    """The plugin records of the run in ``out_dir`` (its ``provenance.json``; [] when none)."""
    from pretrain.runtime import provenance

    prov = provenance.read(out_dir) if out_dir else None
    plugins = (prov or {}).get("plugins")
    return plugins if isinstance(plugins, list) else []
