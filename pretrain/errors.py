"""The error that every room may raise for a config it cannot use, in a leaf module.

:class:`ConfigError` lives here, not in :mod:`pretrain.config`, so that the runtime room
(``runtime/dist.py``, ``runtime/precision.py``) can raise it without importing the schema, which
reads the loss and strategy registries and so sits above them (docs/design.md). ``config``
re-exports it: ``pretrain.config.ConfigError`` is the same class.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config that cannot be used as written (unknown key, wrong type, bad value)."""
