"""One generic submitit launcher: pretraining, evaluation and sweeps as callable tasks.

A task is a picklable callable (as DINO's ``run_with_submitit.Trainer``): ``__call__`` exports the
torch.distributed variables from ``submitit.JobEnvironment`` and runs the entry point, which resumes
from the run directory by itself; ``checkpoint()`` is what submitit calls on the preemption or
time-limit signal, and returns a ``DelayedSubmission`` of the same task so the job requeues.

The engine catches SIGUSR2 itself, finishes the current step, writes ``last.pt`` on rank 0 and only
then forwards the signal to submitit's handler (``StopSignals.forward``), so nothing but the step
in flight is lost. Requeues are bounded by ``train.max_requeues``.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class SlurmError(RuntimeError):
    """Something that must be fixed before anything is submitted."""


@dataclass
class Resources:
    """SLURM resources; ``tasks_per_node`` is one task per GPU (one task on a CPU-only node)."""

    nodes: int = 1
    gpus_per_node: int = 0
    partition: str | None = None
    time: str = "72:00:00"
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    mem: str | None = None
    cpus_per_task: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def timeout_min(self) -> int:
        return parse_time(self.time)


def parse_time(text: str) -> int:
    """SLURM ``[D-]HH:MM:SS`` / ``MM`` / ``HH:MM:SS`` to whole minutes (rounded up)."""
    days, _, rest = text.rpartition("-")
    try:
        parts = [int(p) for p in rest.split(":")]
        days_n = int(days) if days else 0
    except ValueError:
        raise SlurmError(f"--time {text!r} is not [D-]HH:MM:SS") from None
    if not 1 <= len(parts) <= 3 or min(parts) < 0 or days_n < 0:
        raise SlurmError(f"--time {text!r} is not [D-]HH:MM:SS")
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        h, m, s = (parts + [0, 0])[:3]
    else:  # MM, MM:SS, HH:MM:SS
        h, m, s = {1: (0, parts[0], 0), 2: (0, *parts)}.get(len(parts), tuple(parts))
    total = days_n * 1440 + h * 60 + m + (1 if s else 0)
    if total < 1:
        raise SlurmError(f"--time {text!r} is shorter than a minute")
    return total


def check_cluster(partition: str | None) -> None:
    """Fail before submitting when SLURM is missing or the partition does not exist."""
    if shutil.which("sbatch") is None:
        raise SlurmError(
            "sbatch is not on PATH: run this on a SLURM login node (or load its module)"
        )
    if partition is None:
        return
    out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise SlurmError(f"sinfo failed ({out.stderr.strip()}); is SLURM reachable (SLURM_CONF)?")
    known = sorted({p.rstrip("*") for p in out.stdout.split()})
    if partition not in known:
        raise SlurmError(
            f"unknown partition {partition!r}; this cluster has: {', '.join(known)} "
            "(choose one with --partition)"
        )


class PretrainTask:
    """``python -m pretrain --cfg CFG OVERRIDES`` as a requeueable submitit task."""

    def __init__(
        self, cfg: str, overrides: list[str], max_requeues: int, *, requeues: int = 0
    ) -> None:
        self.cfg, self.overrides = cfg, list(overrides)
        self.max_requeues, self.requeues = max_requeues, requeues

    def __call__(self) -> int:
        import submitit

        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        from pretrain import config
        from pretrain.config import files
        from pretrain.engine import loop
        from pretrain.runtime import dist

        cfg_file = files.resolve_path(self.cfg, config.CONFIG_DIR)
        status = loop.main(config.load(self.cfg, self.overrides), cfg_file)
        if status not in (0, 130):
            raise RuntimeError(f"pretraining failed with exit status {status}")
        dist.finish(status, leave=False)  # destroy the group; submitit still writes the result
        return status

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Called by submitit on SIGUSR2 (after the engine saved): requeue the same task."""
        import submitit

        if self.requeues >= self.max_requeues:
            print(
                f"not requeueing: {self.requeues} requeues reached train.max_requeues", flush=True
            )
            return None
        task = PretrainTask(self.cfg, self.overrides, self.max_requeues, requeues=self.requeues + 1)
        return submitit.helpers.DelayedSubmission(task)


class EvalTask:
    """``python -m linear_eval ARGS`` as a submitit task (no requeue: evaluation is short)."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = list(argv)

    def __call__(self) -> int:
        from linear_eval.__main__ import main

        status = main(self.argv)
        if status != 0:
            raise RuntimeError(f"evaluation failed with exit status {status}")
        return status


def executor(name: str, folder: Path, res: Resources, max_requeues: int) -> Any:
    """A submitit SLURM executor with one task per GPU (or one task per node without GPUs)."""
    import submitit

    ex = submitit.AutoExecutor(
        folder=str(folder), cluster="slurm", slurm_max_num_timeout=max_requeues
    )
    params: dict[str, Any] = {
        "name": name,
        "nodes": res.nodes,
        "tasks_per_node": max(res.gpus_per_node, 1),
        "timeout_min": res.timeout_min(),
        "slurm_signal_delay_s": 120,
    }
    if res.gpus_per_node:
        params["gpus_per_node"] = res.gpus_per_node
    if res.cpus_per_task:
        params["cpus_per_task"] = res.cpus_per_task
    if res.mem:
        params["slurm_mem"] = res.mem
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(res, key):
            params[f"slurm_{key}"] = getattr(res, key)
    params.update(res.extra)
    ex.update_parameters(**params)
    return ex
