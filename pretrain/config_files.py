"""Reading a config file: the path of a name (a shipped config or a file), its text (UTF-8), and
YAML that refuses a key given twice. Errors are :class:`~pretrain.errors.ConfigError` (exit 2)."""

from __future__ import annotations

import difflib
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


def read_text(path: Path) -> str:
    """A config file's text; unreadable or not UTF-8: a :class:`ConfigError`."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read ({e.strerror or e})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} on line {line}); save the file "
            "as UTF-8"
        ) from None


def parse_yaml(text: str, source: str, prefix: str = "") -> Any:
    """``yaml.safe_load`` that refuses a key given twice in one mapping (PyYAML silently keeps
    the last), naming the dotted key and both lines."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None:
            _refuse_duplicates(node, source, prefix)
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from None


def _refuse_duplicates(node: yaml.Node, source: str, prefix: str) -> None:
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _refuse_duplicates(item, source, prefix)
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
        _refuse_duplicates(value_node, source, f"{prefix}{key}.")
