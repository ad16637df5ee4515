"""The files of a run folder, written so that a folder someone hands you (a tarball keeps
symbolic links) cannot make a run write outside it, and read with errors that name the file.

* A file a run writes is never a symbolic link (:func:`refuse_link`, ``lstat``): a link is
  refused with a message naming it and where it points, before anything is written.
* A folder a run writes into (``checkpoints/``, ``eval/``, ``tensorboard/``...) must resolve
  inside the run folder (:func:`ensure_dir_inside`); a link to elsewhere is refused the same way.
* Whole files (checkpoints, ``config.yaml``, JSON results) are written as a temporary file next to
  their target (``mkstemp``: created, never followed) and renamed over it with ``os.replace``
  (:func:`atomic_write`), so a reader never sees half a file and a planted link is replaced, not
  written through. A device or pipe (``/dev/null``) is written in place: it cannot be replaced.
* Appended files (``metrics.jsonl``) and the run lock are opened with ``O_NOFOLLOW``
  (:func:`open_nofollow`), which fails on a link that appeared after the check.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from pretrain.errors import ConfigError


class RunFolderLinkError(ConfigError):
    """A path a run would write is a symbolic link, or leads out of the run folder (exit 2)."""


def link_message(link: Path, run_dir: Path | None = None) -> str:
    """Why ``link`` is refused, naming where it points: a file a run writes (``run_dir`` None) or
    a folder of ``run_dir`` that leads out of it."""
    target = os.readlink(link)
    if run_dir is None:
        return (
            f"{link} is a symbolic link to {target}; nothing is written through a link, which "
            "could lead out of the run folder: remove the link (or put a copy of its file in its "
            "place) and run again"
        )
    return (
        f"{link} is a symbolic link to {target}, outside the run folder {run_dir}; a run writes "
        "nothing outside its folder: remove the link (or put a copy of the folder in its place) "
        "and run again"
    )


def _inside(path: Path, run_dir: Path) -> bool:
    return path.resolve().is_relative_to(run_dir.resolve())


def check_inside(folder: Path, run_dir: Path) -> None:
    """Refuse when ``folder`` (under ``run_dir``) resolves outside it, naming the first folder
    between the two that is a link leading out."""
    if _inside(folder, run_dir):
        return
    try:
        rel = folder.absolute().relative_to(run_dir.absolute())
    except ValueError:  # not under run_dir as written: nothing of the run folder to check
        return
    step = run_dir
    for part in rel.parts:
        step = step / part
        if step.is_symlink() and not _inside(step, run_dir):
            raise RunFolderLinkError(link_message(step, run_dir))


def refuse_link(path: str | Path, run_dir: str | Path | None = None) -> Path:
    """``path`` when it may be written: not a symbolic link, and, given the ``run_dir`` it lies in,
    in a folder that resolves inside ``run_dir``; else :class:`RunFolderLinkError` naming the
    link and its target."""
    path = Path(path)
    if run_dir is not None:
        check_inside(path.parent, Path(run_dir))
    if path.is_symlink():
        raise RunFolderLinkError(link_message(path))
    return path


def ensure_dir_inside(path: str | Path, run_dir: str | Path) -> Path:
    """Make the folder ``path`` (and its parents) after checking that it resolves inside
    ``run_dir`` (a link to a folder inside it is fine; one leading out is refused)."""
    path, run_dir = Path(path), Path(run_dir)
    check_inside(path, run_dir)
    path.mkdir(parents=True, exist_ok=True)
    check_inside(path, run_dir)  # a link that appeared meanwhile
    return path


def check_run_folder(run_dir: str | Path, files: tuple[str, ...], dirs: tuple[str, ...]) -> None:
    """Before a run starts: none of ``files`` (paths relative to ``run_dir``) is a link, none of
    ``dirs`` leads out of ``run_dir``, and nothing in a ``dirs`` folder is a link."""
    run_dir = Path(run_dir)
    for name in dirs:
        check_inside(run_dir / name, run_dir)
        if (run_dir / name).is_dir():
            for f in sorted((run_dir / name).iterdir()):
                refuse_link(f)
    for name in files:
        refuse_link(run_dir / name, run_dir)


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (another thread
    creating a file meanwhile would get the wrong permissions)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _in_place(path: Path) -> bool:
    """Whether ``path`` is a device or pipe (``/dev/null``), written in place, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def atomic_write(
    path: str | Path,
    write: Callable[[IO[bytes]], None],
    run_dir: str | Path | None = None,
    private: bool = False,
) -> Path:
    """Write ``path`` by ``write(file)``: after :func:`refuse_link`, into a temporary file in the
    same folder, flushed, synced and renamed over ``path`` (its folder synced too). A failure
    removes the temporary file and re-raises; the previous ``path`` is intact. ``private``: the
    file is readable by its owner only (a checkpoint); else the umask's usual permissions."""
    path = refuse_link(path, run_dir)
    if run_dir is not None and path.absolute().is_relative_to(Path(run_dir).absolute()):
        ensure_dir_inside(path.parent, run_dir)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    if _in_place(path):
        with open(path, "wb") as f:
            write(f)
        return path
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            if not private:
                os.fchmod(f.fileno(), 0o666 & ~_umask())
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)
    return path


def write_text(path: str | Path, text: str, run_dir: str | Path | None = None) -> Path:
    """:func:`atomic_write` of ``text`` (UTF-8)."""
    return atomic_write(path, lambda f: f.write(text.encode()), run_dir)


def open_nofollow(path: str | Path, flags: int, run_dir: str | Path | None = None) -> int:
    """``os.open(path, flags | O_NOFOLLOW | O_CLOEXEC, 0o666)`` after :func:`refuse_link`; a link
    found by the open itself is the same :class:`RunFolderLinkError`."""
    path = refuse_link(path, run_dir)
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP and path.is_symlink():
            raise RunFolderLinkError(link_message(path)) from None
        raise


def open_append(path: str | Path, run_dir: str | Path | None = None) -> IO[str]:
    """``path`` opened to append text, created if absent, never through a link."""
    fd = open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, run_dir)
    return os.fdopen(fd, "a")


def read_json(path: str | Path) -> Any:
    """The JSON in ``path``; a file cut short or not JSON is a ``ValueError`` naming it."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(
            f"{path} is not valid JSON ({e}): a file cut short or edited by hand; run the command "
            "that writes it again, or move it away"
        ) from None
