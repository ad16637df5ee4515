"""Checks made before any feature is computed, so a bad path costs no work: the checkpoint file
exists (exit 2, as a bad argument) and every directory an evaluator will write into can be
written."""

from __future__ import annotations

import os
from pathlib import Path

from pretrain.runtime import run_folder


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
    """Check, creating nothing, that ``directory`` can be created or written: its nearest existing
    ancestor must be a directory this process may write into (read-only mounts count as not
    writable); otherwise a :class:`UsageError` naming ``what`` and the path."""
    d = Path(directory).absolute()
    p = d
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir():
        raise UsageError(f"{what} {d} cannot be written: {p} is a file; nothing was computed")
    if not os.access(p, os.W_OK | os.X_OK):
        raise UsageError(
            f"{what} {d} cannot be written ({p} is not writable); nothing was computed"
        )
    return d


def require_output_file(path: Path, run_dir: Path | None) -> Path:
    """Check, before any work, that the results file ``path`` is not a folder, not a symbolic
    link and, given the ``run_dir`` it lies in, in a folder that resolves inside it."""
    if path.is_dir() and not path.is_symlink():
        raise UsageError(f"--out {path} is a directory: give a file name; nothing was computed")
    return run_folder.refuse_link(path, run_dir)
