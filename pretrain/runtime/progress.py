"""Progress a person can see: a tqdm bar on a terminal, and where stderr is no terminal (SLURM,
``nohup``, CI) one line per ``train.log_every`` steps with the loss, images/s, the data-wait
fraction and the ETA. The loader's wait is timed around ``next()`` on the host, so measuring it
adds no device sync; the numbers are read at log steps, which already sync once for the loss.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any


def eta(seconds: float) -> str:
    return str(timedelta(seconds=max(0, round(seconds))))


class Progress:
    """One epoch's progress display (rank 0 only: ``show`` False elsewhere)."""

    def __init__(self, *, epoch: int, steps: int, start: int, show: bool) -> None:
        self.epoch, self.steps = epoch, steps
        self.terminal = show and sys.stderr.isatty()
        self.lines = show and not self.terminal
        self.wait = 0.0  # seconds spent waiting on the loader since the last take_wait()
        self.bar = None
        if self.terminal:
            from tqdm import tqdm

            self.bar = tqdm(
                total=steps, initial=start, desc=f"epoch {epoch}", leave=False, dynamic_ncols=True
            )

    def batches(self, loader: Iterable) -> Iterator[Any]:
        """Iterate ``loader``, adding the time spent inside its ``next()`` to :attr:`wait`."""
        it = iter(loader)
        while True:
            tic = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                return
            self.wait += time.perf_counter() - tic
            yield batch

    def take_wait(self) -> float:
        waited, self.wait = self.wait, 0.0
        return waited

    def update(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def report(self, record: dict[str, Any], *, step_in_epoch: int, steps_left: int) -> None:
        """Show a log step's record; ``steps_left``: global steps until the run ends."""
        per_step = record["step_time_s"]
        if self.bar is not None:
            self.bar.set_postfix(
                loss=f"{record['loss']:.4f}",
                img_s=f"{record['images_per_s']:.0f}",
                wait=f"{record['data_wait_frac']:.0%}",
            )
        elif self.lines:
            skipped = record.get("skipped_images")
            print(
                f"epoch {self.epoch} step {step_in_epoch}/{self.steps} (global "
                f"{record['global_step']}) loss {record['loss']:.4f} lr {record['lr']:.4g} "
                f"{record['images_per_s']:.1f} img/s data-wait {record['data_wait_frac']:.0%} "
                f"ETA epoch {eta(per_step * (self.steps - step_in_epoch))} "
                f"run {eta(per_step * steps_left)}"
                + (f" skipped-images {skipped}" if skipped else ""),
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
