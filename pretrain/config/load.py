"""The config of a run: defaults (:mod:`pretrain.config.schema`), then the YAML file's
overrides, then ``dotted.key=value`` overrides, checked.

    cfg = load("digits_moco.yaml", ["train.epochs=5", "out_dir=/tmp/run"])

A bare file name resolves to ``pretrain/configs/``; a path is read as it is. Unknown keys and values
of the wrong type raise :class:`ConfigError`, naming the key, the file and the closest valid key;
the CLI turns that into exit status 2. Derived values (effective learning rate, steps per epoch)
come from :func:`derived`, which never mutates the config.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pretrain.config import files, plugins, rules
from pretrain.config.schema import (
    CHOICES,
    CONFIG_DIR,
    Config,
    LossConfig,
    NegativesConfig,
    registered_choices,
)
from pretrain.config.types import coerce, typed_kwargs
from pretrain.errors import ConfigError


def load(name: str, overrides: list[str] | None = None) -> Config:
    """Defaults, then the YAML file's overrides, then ``dotted.key=value`` overrides."""
    path = files.resolve_path(name, CONFIG_DIR)
    raw = files.parse_yaml(files.read_text(path), str(path)) or {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: the top level must be a mapping of keys, got {type(raw).__name__}"
        )
    cfg = merge(Config(), raw, source=str(path))
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {ascii(item)} is not of the form dotted.key=value")
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:  # bytes the locale could not decode (surrogate escapes)
            raise ConfigError(
                f"config key {ascii(key.strip())} on the command line: the value {ascii(value)} "
                "is not UTF-8 text; give paths and values in UTF-8"
            ) from None
        nested: dict[str, Any] = {}
        node = nested
        dotted = key.strip()
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        text = value.strip()
        node[leaf] = files.parse_yaml(value, "command line", f"{dotted}.") if text else ""
        cfg = merge(cfg, nested, source="command line")
    if not cfg.out_dir:
        cfg = dataclasses.replace(cfg, out_dir=str(Path("runs") / path.stem))
    cfg = plugins.load_plugins(cfg, "the config", base=path.parent)[0]
    cfg = typed_kwargs(cfg)
    validate(cfg)
    return cfg


def merge(base: Any, raw: dict[str, Any], source: str, prefix: str = "") -> Any:
    """Return a copy of dataclass ``base`` with ``raw`` applied; strict on keys and types."""
    hints = typing.get_type_hints(type(base))
    names = [f.name for f in dataclasses.fields(base)]
    changes: dict[str, Any] = {}
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        if dotted in files.MOVED:
            raise ConfigError(files.moved_message(dotted, value, source))
        if key not in names:
            valid = [f"{prefix}{n}" for n in names]
            close = difflib.get_close_matches(dotted, valid, n=1, cutoff=0.5)
            raise ConfigError(
                f"unknown config key {dotted!r} in {source}"
                + (f"; closest valid key: {close[0]!r}" if close else "")
                + f" (valid keys here: {', '.join(valid)})"
            )
        current = getattr(base, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(
                    f"{dotted!r} in {source} must be a mapping of keys, got {value!r}"
                )
            changes[key] = merge(current, value, source, prefix=f"{dotted}.")
        elif isinstance(current, dict) and isinstance(value, dict):
            for name in value:
                if f"{dotted}.{name}" in files.MOVED:  # a setting that moved out of kwargs
                    raise ConfigError(files.moved_message(f"{dotted}.{name}", value[name], source))
            # dict fields (negatives.kwargs) merge key by key: an override of one keyword keeps
            # the file's others
            changes[key] = {**current, **coerce(value, hints[key], dotted, source, CHOICES)}
        else:
            changes[key] = coerce(value, hints[key], dotted, source, CHOICES)
    return dataclasses.replace(base, **changes)


def unknown_name(key: str, cfg: Config, records: list[dict[str, Any]] | None = None) -> str:
    """Why ``negatives.name`` / ``loss.name`` names nothing registered here, or '': a plugin the
    run in ``out_dir`` recorded (``records``, its provenance), or a name no registered one is
    close to, is a plugin not installed here (said first); a close one, a typo (with the
    suggestion)."""
    allowed = registered_choices()[key]
    value = _value(cfg, key)
    if value in allowed:
        return ""
    kind = "loss" if key.startswith("loss.") else "negative strategy"
    where = plugins.recorded_as(kind, str(value), records)
    if where:
        return (
            f"config key {key!r} is {value!r}: not installed here: the run in {cfg.out_dir} "
            f"trained with the plugin {where} (install it, or name its file in plugins: [...])"
        )
    close = difflib.get_close_matches(str(value), allowed, n=1)
    if not close:
        return (
            f"config key {key!r} is {value!r}: not installed here: no {kind} of that name is "
            "built in or installed (install the plugin's package, or name its file in "
            f"plugins: [...]); installed: {', '.join(allowed)}"
        )
    return (
        f"config key {key!r} is {value!r}; expected one of {', '.join(allowed)} "
        f"(did you mean {close[0]!r}?)"
    )


def validate(cfg: Config, *, encoder_only: bool = False) -> None:
    """Value checks that the types alone cannot express: the choices, the registries' keyword
    arguments, then the rules of :mod:`pretrain.config.rules`. ``encoder_only``: the loss and
    strategy are not checked (:func:`from_dict` puts the defaults in their place)."""
    if encoder_only:
        facts = rules.Facts(loss=None, strategy=None, names=rules.registry_names())
        _check_choices(cfg, CHOICES)
        _check_rules(cfg, facts)
        return
    registries = rules.registries()
    for key, registry in registries.items():
        why = registry.problem(_value(cfg, key))
        if why:
            raise ConfigError(f"config key {key!r}: {why}")
    records = plugins.run_records(cfg.out_dir)  # a resume's run: the plugins it trained with
    unknown = [why for why in (unknown_name(k, cfg, records) for k in registries) if why]
    if unknown:  # every unknown name, the ones no built-in is close to first: not installed
        raise ConfigError("; ".join(sorted(unknown, key=lambda w: "did you mean" in w)))
    _check_choices(cfg, {**CHOICES, **registered_choices()})
    rules.check_loss_kwargs(cfg, registries["loss.name"].get(cfg.loss.name))
    try:
        registries["negatives.name"].check_kwargs(cfg.negatives.name, dict(cfg.negatives.kwargs))
    except ValueError as e:
        raise ConfigError(f"config key 'negatives.kwargs': {e}") from None
    _check_rules(cfg, rules.facts(cfg.loss.name, cfg.negatives.name))


def _check_choices(cfg: Config, choices: dict[str, Any]) -> None:
    for key, allowed in choices.items():
        value = _value(cfg, key)
        if value not in allowed:
            close = difflib.get_close_matches(str(value), allowed, n=1)
            raise ConfigError(
                f"config key {key!r} is {value!r}; expected one of {', '.join(allowed)}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
            )


def _check_rules(cfg: Config, facts: rules.Facts) -> None:
    for rule in rules.RULES:  # in order: the first that fails is the error
        error = rule.error(cfg, facts)
        if error:
            raise ConfigError(error)


def _value(cfg: Config, dotted: str) -> Any:
    return rules.value_of(cfg, dotted)


@dataclass(frozen=True, kw_only=True)
class Derived:
    """Values computed from the config and the data (MAE prints its ``lr`` from ``blr`` the same
    way); printed and saved with the run as ``derived.yaml``, never written back to the config."""

    lr: float  # train.base_lr * train.batch_size / train.lr_base_batch
    global_batch: int  # train.batch_size
    per_rank_batch: int  # train.batch_size // world_size
    world_size: int
    train_size: int  # training images after data.subset / data.in_classes
    steps_per_epoch: int  # train_size // train.batch_size (drop_last, as MoCo)
    total_steps: int  # steps_per_epoch * train.epochs
    queue_fraction_of_train: float  # moco.queue_size / train_size, rounded to 4 places
    initial_loss_ln_1_plus_K: float  # ln(K + 1): InfoNCE's loss at chance, rounded to 4 places

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def derived(cfg: Config, train_size: int, world_size: int = 1) -> Derived:
    """Values computed from the config and the data; printed and saved with the run."""
    steps = train_size // cfg.train.batch_size  # drop_last, as MoCo
    return Derived(
        lr=cfg.train.base_lr * cfg.train.batch_size / cfg.train.lr_base_batch,
        global_batch=cfg.train.batch_size,
        per_rank_batch=cfg.train.batch_size // world_size,
        world_size=world_size,
        train_size=train_size,
        steps_per_epoch=steps,
        total_steps=steps * cfg.train.epochs,
        queue_fraction_of_train=round(cfg.moco.queue_size / max(train_size, 1), 4),
        initial_loss_ln_1_plus_K=round(math.log(cfg.moco.queue_size + 1), 4),
    )


def to_dict(cfg: Config) -> dict[str, Any]:
    """Plain nested dict (tuples as lists) for YAML and checkpoints."""

    def plain(v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return plain(dataclasses.asdict(cfg))


def from_dict(
    raw: dict[str, Any],
    source: str = "checkpoint",
    *,
    encoder_only: bool = False,
    records: list[dict[str, Any]] | None = None,
) -> Config:
    """Inverse of :func:`to_dict`, with the same strict checks; an older config's moved keys
    are migrated (:func:`pretrain.config.files.migrate`). The ``plugins`` it names are kept as
    text and never imported: a checkpoint's config is data, and a file or module named there
    would run its code (only the config the user gives, :func:`load`, imports plugins; a resume
    compares the lists first, :mod:`pretrain.engine.checkpoint`). ``encoder_only`` (evaluation,
    export): the encoder needs no loss and no strategy, so their names and settings are kept as
    the run's record and not checked (a setting an older version migrated, a plugin not
    installed here or claiming a built-in's name), a warning naming a loss or strategy that
    cannot be used here (with the plugin the checkpoint's provenance ``records`` name); the rest
    is checked with the default loss and strategy in their place."""
    cfg = merge(Config(), files.migrate(raw, source), source=source)
    if encoder_only:
        missing = plugins.missing_plugins(cfg, records)
        if missing:
            print(
                f"warning: {source}: trained with {'; '.join(missing)}; the encoder does not "
                "need it: evaluation and export go on without it",
                file=sys.stderr,
            )
        stand_in = dataclasses.replace(cfg, loss=LossConfig(), negatives=NegativesConfig())
        validate(stand_in, encoder_only=True)
        return cfg
    cfg = typed_kwargs(cfg)
    validate(cfg)
    return cfg


def dump(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)
