"""Checks made before any feature is computed, so a bad path costs no work: the checkpoint file
exists (exit 2, as a bad argument) and every directory an evaluator will write into can be
written."""

from __future__ import annotations

import os
from pathlib import Path


class UsageError(ValueError):
    """A bad argument found before any work: the CLI exits 2 with this message."""


def require_checkpoint(path: str | Path) -> Path:
    """``path`` as a Path when it is an existing file, else :class:`UsageError` naming it."""
    p = Path(path)
    if not p.is_file():
        what = "is a directory" if p.is_dir() else "does not exist"
        raise UsageError(f"--ckpt {p} {what}: give a checkpoint file (RUN/checkpoints/last.pt)")
    return p


def require_writable(directory: str | Path, what: str) -> Path:
    """Create ``directory`` (and parents) and prove a file can be written in it; otherwise a
    :class:`UsageError` naming ``what`` and the path."""
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / f".negmine-write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UsageError(
            f"{what} {d} cannot be written ({e.strerror or e}); nothing was computed"
        ) from e
    return d
