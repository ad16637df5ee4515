"""Rank-0 metrics: one JSON object per line in ``metrics.jsonl`` plus TensorBoard scalars."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pretrain.runtime import dist, run_folder


class MetricsLog:
    """Appends to ``RUN/metrics.jsonl`` and ``RUN/tensorboard/``; silent on ranks other than 0.

    Every line carries ``kind`` ("step" or "epoch") and ``global_step``. On resume,
    :meth:`truncate` drops lines written after the checkpoint, so a replayed step is never
    recorded twice.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = Path(run_dir) / "metrics.jsonl"
        self.tb_dir = Path(run_dir) / "tensorboard"
        self._writer: Any = None
        self._closed = False

    @property
    def writer(self) -> Any:
        """The TensorBoard writer, made at the first record: a run refused before it (another
        run's folder, a changed config) leaves no event file."""
        if self._writer is None and dist.is_main() and not self._closed:
            from torch.utils.tensorboard import SummaryWriter

            run_folder.ensure_dir_inside(self.tb_dir, self.run_dir)
            self._writer = SummaryWriter(str(self.tb_dir))
        return self._writer

    def has(self, record: dict[str, Any]) -> bool:
        """Whether ``metrics.jsonl`` holds a line of ``record``'s kind and global step; True on
        ranks other than 0 (which never read the file)."""
        if not dist.is_main() or not self.path.exists():
            return not dist.is_main()
        for line in self.path.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if (r.get("kind"), r.get("global_step")) == (record["kind"], record["global_step"]):
                return True
        return False

    def truncate(self, global_step: int) -> None:
        if not dist.is_main() or not self.path.exists():
            return
        kept = []
        for line in self.path.read_text().splitlines():
            try:
                if json.loads(line).get("global_step", 0) <= global_step:
                    kept.append(line)
            except json.JSONDecodeError:  # a line cut by a hard kill
                continue
        run_folder.write_text(self.path, "".join(f"{line}\n" for line in kept), self.run_dir)

    def write(self, record: dict[str, Any], tb_prefix: str) -> None:
        if not dist.is_main():
            return
        with run_folder.open_append(self.path, self.run_dir) as f:
            f.write(json.dumps(record) + "\n")
        for key, value in record.items():
            if key not in ("kind", "global_step", "epoch") and isinstance(value, (int, float)):
                if math.isfinite(value):
                    self.writer.add_scalar(f"{tb_prefix}/{key}", value, record["global_step"])
        self.writer.flush()

    def histogram(self, tag: str, values: Any, global_step: int) -> None:
        """A TensorBoard histogram (e.g. per-sample kappa); rank 0 only."""
        if self.writer is not None:
            self.writer.add_histogram(tag, values.detach().float().cpu(), global_step)

    def close(self) -> None:
        """Close the writer (idempotent); the log accepts no TensorBoard record after it."""
        if self._writer is not None:
            self._writer.close()
        self._writer, self._closed = None, True
