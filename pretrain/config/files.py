"""Reading a config file: the path of a name (a shipped config or a file), its text (UTF-8), YAML
that refuses a key given twice, and an older config's moved keys (:data:`MOVED`). Errors are
:class:`~pretrain.errors.ConfigError` (exit 2)."""

from __future__ import annotations

import difflib
import stat
import sys
from pathlib import Path
from typing import Any

import yaml

from pretrain.errors import ConfigError


def resolve_path(name: str, config_dir: Path) -> Path:
    """A bare name is looked up among the shipped configs; anything else is a path."""
    path = Path(name)
    if path.is_dir():
        raise ConfigError(
            f"config file {name!r} is a directory; give a YAML file (a path, or the name of a "
            "shipped config)"
        )
    if path.exists():
        return path
    shipped = config_dir / path.name
    if path.parent == Path(".") and shipped.exists():
        return shipped
    known = sorted(p.name for p in config_dir.glob("*.yaml"))
    hint = difflib.get_close_matches(path.name, known, n=1)
    raise ConfigError(
        f"config file {name!r} not found (neither a path nor a shipped config)"
        + (f"; did you mean {hint[0]!r}?" if hint else "")
        + f" Shipped configs: {', '.join(known)}"
    )


#: The largest config file read (1 MiB): a shipped config is under 4 KiB, and a file without end
#: (``/dev/zero``) or a huge one would otherwise fill the memory before YAML sees it.
MAX_BYTES = 1 << 20

#: The most values a config may expand to through YAML aliases: an alias repeats its anchor's whole
#: value, so anchors nested in each other multiply (10 levels of 9 aliases, 371 bytes, are 9**10).
MAX_VALUES = 1 << 20


def read_text(path: Path) -> str:
    """A config file's text; unreadable, not a regular file, over :data:`MAX_BYTES` or not UTF-8:
    a :class:`ConfigError`. At most ``MAX_BYTES + 1`` bytes are read."""
    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        raise ConfigError(
            f"config file {path} is not a regular file (a {_kind(mode)}); give a YAML file"
        )
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read ({e.strerror or e})") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(
            f"config file {path} is larger than {MAX_BYTES} bytes (1 MiB), the most a config is "
            "read to; give the YAML file of a run's settings (a shipped config is under 4 KiB)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} on line {line}); save the file "
            "as UTF-8"
        ) from None


def _kind(mode: int) -> str:
    kinds = [
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "special file")


def parse_yaml(text: str, source: str, prefix: str = "") -> Any:
    """``yaml.safe_load`` that refuses a key given twice in one mapping (PyYAML silently keeps
    the last), naming the dotted key and both lines, and a document whose aliases expand to more
    than :data:`MAX_VALUES` values. Each node is visited once (an alias is the node of its anchor),
    so neither check walks an alias's value again."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None:
            _refuse_duplicates(node, source, prefix, set())
            if _expanded_size(node, {}) > MAX_VALUES:
                raise ConfigError(
                    f"{source}: its YAML aliases expand to more than {MAX_VALUES} values (an "
                    "alias repeats its anchor's whole value, so anchors nested in each other "
                    "multiply); write the values out, or use fewer aliases"
                )
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from None


def _refuse_duplicates(node: yaml.Node, source: str, prefix: str, seen_nodes: set[int]) -> None:
    if id(node) in seen_nodes:  # an alias: its anchor's node was checked already
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _refuse_duplicates(item, source, prefix, seen_nodes)
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict[str, int] = {}
    for key_node, value_node in node.value:
        key = str(key_node.value)
        line = key_node.start_mark.line + 1
        if key in seen and key != "<<":
            raise ConfigError(
                f"config key {prefix + key!r} is given more than once in {source} (lines "
                f"{seen[key]} and {line}); YAML would silently keep the last: keep one"
            )
        seen[key] = line
        _refuse_duplicates(value_node, source, f"{prefix}{key}.", seen_nodes)


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """The values ``node`` stands for once every alias is written out (memoised per node)."""
    if id(node) in sizes:
        return sizes[id(node)]
    sizes[id(node)] = 1  # a recursive alias (&a [*a]) counts once, as PyYAML builds it
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    else:
        children = []
    total = 1
    for child in children:
        total = min(total + _expanded_size(child, sizes), MAX_VALUES + 1)
    sizes[id(node)] = total
    return total


#: Keys that moved: old key -> (new key, the old default, where such settings live now). An old
#: checkpoint's config carries every key at its default, which is dropped there without a word.
LOSS_KWARGS = "a loss's own settings are under loss.kwargs, checked against its constructor"
KAPPA = "the kappa head's settings are the kappa section"
MOVED = {
    "loss.supcon_reference_scale": ("loss.kwargs.reference_scale", False, LOSS_KWARGS),
    "loss.cider_lambda_c": ("loss.kwargs.lambda_c", 2.0, LOSS_KWARGS),
    "loss.cider_alpha": ("loss.kwargs.alpha", 0.95, LOSS_KWARGS),
    "loss.cider_comp_scale": ("loss.kwargs.comp_scale", False, LOSS_KWARGS),
    "loss.cider_dis_scale": ("loss.kwargs.dis_scale", False, LOSS_KWARGS),
    "loss.kappa_lambda_align": ("kappa.lambda_align", 0.05, KAPPA),
    "loss.kappa_lambda_reg": ("kappa.lambda_reg", 0.005, KAPPA),
    "loss.kwargs.kappa_lambda_align": ("kappa.lambda_align", 0.05, KAPPA),
    "loss.kwargs.kappa_lambda_reg": ("kappa.lambda_reg", 0.005, KAPPA),
    "model.kappa_hidden": ("kappa.hidden", 0, KAPPA),
}


def moved_message(key: str, value: Any, source: str) -> str:
    """``key`` has moved: the new spelling, on the command line and in YAML."""
    new, _, where = MOVED[key]
    *parents, leaf = new.split(".")
    yaml = f"{leaf}: {value!r}"
    for part in reversed(parents):
        yaml = f"{part}: {{{yaml}}}"
    spelled = f"write {new}={value!r} (in YAML: {yaml})"
    return f"config key {key!r} in {source} has moved: {spelled}; {where}"


def migrate(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """An old checkpoint's config with the moved keys (:data:`MOVED`) spelled the new way: a key
    at its old default is dropped, any other moves to its new key with a warning if the saved run
    used it (:func:`takes`); one it did not use had no effect and is dropped, with a note."""
    raw = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    if isinstance(raw.get("loss"), dict) and isinstance(raw["loss"].get("kwargs"), dict):
        raw["loss"]["kwargs"] = dict(raw["loss"]["kwargs"])
    head = (raw.get("model") or {}).get("kappa_hidden", 0) or (raw.get("kappa") or {}).get("hidden")
    notes = []
    for old, (new, default, _) in MOVED.items():
        *parents, leaf = old.split(".")
        node = raw
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            continue
        value = node.pop(leaf)
        if value == default:
            continue
        section, name = new.split(".")[0], new.split(".")[-1]
        if section == "kappa" and name != "hidden" and not head:
            notes.append(f"{old} dropped (the model has no kappa head: it had no effect)")
            continue
        if new.startswith("loss.kwargs.") and not takes(raw, name):
            loss = (raw.get("loss") or {}).get("name", "infonce")
            notes.append(f"{old} dropped (loss {loss!r} does not take it: it had no effect)")
            continue
        target = raw.setdefault(section, {})
        if new.startswith("loss.kwargs."):
            target = target.setdefault("kwargs", {})
        target[name] = value
        notes.append(f"{old} -> {new}")
    if notes:
        note(f"{source}: an older config, migrated: {', '.join(notes)}")
    return raw


_NOTED: set[str] = set()


def note(message: str) -> None:
    """Print ``note: <message>`` as one line on stderr, once per process (a checkpoint's config
    is read more than once by a resume or an evaluation)."""
    if message not in _NOTED:
        _NOTED.add(message)
        print(f"note: {message}", file=sys.stderr, flush=True)


def takes(raw: dict[str, Any], arg: str) -> bool:
    """Whether the saved loss's constructor takes the moved setting ``arg`` (a loss not registered
    here: kept, for the checks to name)."""
    from pretrain.losses import registry  # the registries import torch; config stays light

    name = (raw.get("loss") or {}).get("name", "infonce")
    if name not in registry or registry.problem(name):
        return True
    return arg in registry.parameters(name)
