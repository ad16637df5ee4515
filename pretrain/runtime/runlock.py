"""One live run per run folder: ``RUN/.lock``, held with ``fcntl.flock`` for the run's life.

The kernel drops a ``flock`` when its holder dies (kill -9, a node reboot, a SLURM requeue of the
same job), so a lock left by a killed run is stale by construction and the next run takes it over;
the file's text (pid, host, start time) only names the holder for a refused run. Under DDP only
global rank 0 takes it (see ``pretrain.engine.setup.lock_run_dir``). The file is never deleted: a
delete-then-recreate would let two runs hold locks on two different files.
"""

from __future__ import annotations

import datetime
import fcntl
import os
import socket
from pathlib import Path

from pretrain.runtime import run_folder


class RunInUseError(RuntimeError):
    """The run folder is locked by a live run, or its lock is not a file that can be locked."""


# locks this process holds, by resolved path: [fd, holders]. A second run set up in the same
# process (tests, a notebook) shares the lock instead of refusing itself.
_HELD: dict[Path, list[int]] = {}


class RunLock:
    """``RUN/.lock``: :meth:`acquire` or :class:`RunInUseError` naming the holder."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / ".lock"
        self.key = self.path.resolve()
        self.held = False

    def acquire(self) -> None:
        if self.key in _HELD:
            _HELD[self.key][1] += 1
            self.held = True
            return
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "unknown process"
            os.close(fd)
            raise RunInUseError(
                f"out_dir {self.path.parent} is in use by another run ({holder}; its lock: "
                f"{self.path}); wait for it to finish or stop it, or choose another out_dir"
            ) from None
        except OSError:  # a file system without locks: run unguarded rather than not at all
            os.close(fd)
            print(
                f"warning: {self.path.parent}: this file system does not support locks; "
                "nothing stops a second run on this out_dir",
                flush=True,
            )
            return
        started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        text = f"pid {os.getpid()} on host {socket.gethostname()}, started {started}\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode(), 0)
        _HELD[self.key] = [fd, 1]
        self.held = True

    def _open(self) -> int:
        p = self.path
        if p.is_dir() and not p.is_symlink():
            raise RunInUseError(
                f"the run lock {p} is a directory, not a file; move it away (a run makes its own "
                "lock) and run again"
            )
        try:
            return run_folder.open_nofollow(p, os.O_RDWR | os.O_CREAT, p.parent)
        except run_folder.RunFolderLinkError as e:  # whatever it points to is never truncated
            raise RunInUseError(str(e)) from None
        except OSError as e:
            raise RunInUseError(
                f"cannot open the run lock {p} ({e.strerror}); check that out_dir is writable"
            ) from None

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        entry = _HELD[self.key]
        entry[1] -= 1
        if entry[1] == 0:
            del _HELD[self.key]
            fcntl.flock(entry[0], fcntl.LOCK_UN)
            os.close(entry[0])
