"""What one training run holds: its objects (:class:`Run`, built by :mod:`pretrain.engine.setup`)
and what changes as it trains (:class:`State`, saved by :mod:`pretrain.engine.checkpoint`)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from negmine_core.contract.watch import StepWatch
from pretrain.config import Config, Derived
from pretrain.data.pipeline import Data
from pretrain.engine import cuda_graphs
from pretrain.engine.online_probe import OnlineProbe
from pretrain.losses import Loss
from pretrain.model.encoders import MoCo
from pretrain.runtime import precision, provenance, runlock
from pretrain.runtime.metrics_log import MetricsLog


@dataclass
class State:
    """Everything that changes during training, besides module and optimizer state."""

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    loss_sum: torch.Tensor = field(default_factory=lambda: torch.zeros(()))  # this epoch, on device
    bad_loss: torch.Tensor = field(default_factory=lambda: torch.zeros((), dtype=torch.bool))
    saved_step: int = -1  # global step of the checkpoint on disk (-1: none yet); not saved
    pending: dict[str, Any] | None = None  # the finished epoch's record until its evaluation is
    # logged: saved with the epoch's checkpoint, so a failed evaluation is redone on resume


@dataclass(kw_only=True)
class Run:
    """Everything one training run holds; built by :func:`pretrain.engine.setup.setup`."""

    cfg: Config
    derived: Derived  # lr, steps_per_epoch, total_steps, ... (config.derived)
    device: torch.device
    moco: MoCo
    queue: torch.nn.Module
    strategy: torch.nn.Module
    loss_fn: Loss
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    data: Data
    log: MetricsLog
    state: State
    probe: OnlineProbe | None = None  # eval.online_probe
    graph: cuda_graphs.CapturedStep | None = None  # train.cuda_graphs: train_step, captured
    lock: runlock.RunLock | None = None  # out_dir's lock, held by rank 0
    provenance: provenance.Provenance | None = None  # RUN/provenance.json, also in checkpoints
    watch: StepWatch | None = None  # the per-step checks of the strategy's and loss's outputs

    def close(self) -> None:
        """End the loader workers, close the log and release the run folder: on every exit, so
        an error can never leave the process waiting for workers that ignore SIGTERM."""
        self.data.close()
        self.log.close()
        if self.lock is not None:
            self.lock.release()

    @property
    def run_dir(self) -> Path:
        return Path(self.cfg.out_dir)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The encoders' autocast (``train.amp``, CPU or CUDA); see
        :mod:`pretrain.runtime.precision`."""
        return precision.autocast(self.device, precision.amp_dtype(self.cfg.train.amp, self.device))
