"""A run's checkpoint and its resume: what it holds (:func:`state_dict`, the RNGs of
:func:`rng_state`), writing it (:func:`save`) and reading it back (:func:`restore`), with the config
changes a resume may make (:data:`RESUMABLE_CHANGES`); and the stop signals that make the loop
checkpoint and return (:class:`StopSignals`). The file format (atomic writes, weights-only reads,
:class:`CheckpointError`) is :mod:`pretrain.runtime.checkpoint_io`."""

from __future__ import annotations

import json
import random
import signal
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import torch

from negmine_core import stop as stop_request
from pretrain import config
from pretrain.config import ConfigError
from pretrain.data import identity
from pretrain.data.imagefiles import warn
from pretrain.engine import world
from pretrain.engine.report import check_finite
from pretrain.engine.run import Run
from pretrain.runtime import dist
from pretrain.runtime.checkpoint_io import FORMAT, CheckpointError, load_module
from pretrain.runtime.checkpoint_io import save as save_file

# Keys that may change between a run and its resume; any other difference is refused.
RESUMABLE_CHANGES = (
    "out_dir",
    "data.root",
    "data.num_workers",
    "train.epochs",
    "train.log_every",
    "train.progress_bar",
    "train.ckpt_every",
    "train.keep_every",
    "train.max_requeues",
    "train.max_steps",
    "train.dist_timeout_min",
    "data.test_split",
    "data.skip_bad_images",
    "data.resume_on_changed_data",
    "train.threads",
    "train.compile",
    "train.cuda_graphs",
    "model.split_bn",
    "eval.",
)

# what restore reads besides checkpoint_io.REQUIRED (linear_eval needs none of these)
RESUME_KEYS = ("queue", "scaler", "epoch_stats")

# Checkpoints of negmine before data.augment_on lack it (they ran the per-sample path)
# and call the loss state "objective"; both are read until negmine 0.2, which drops the two shims
# (tests/test_checkpoint.py fails once the version reaches it).
OLD_CHECKPOINTS_READ_UNTIL = (0, 2)


def state_dict(run: Run) -> dict[str, Any]:
    st = run.state
    return {
        "format": FORMAT,
        "epoch": st.epoch,
        "step_in_epoch": st.step_in_epoch,
        "global_step": st.global_step,
        "config": config.to_dict(run.cfg),
        "model": run.moco.state_dict(),
        "queue": run.queue.state_dict(),
        "strategy": run.strategy.state_dict(),
        "loss": run.loss_fn.state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "scaler": run.scaler.state_dict(),
        "scheduler": {"kind": run.cfg.train.lr_schedule, "global_step": st.global_step},
        "rng": rng_state(),
        "world_size": dist.world_size(),  # checked on resume (pretrain/engine/world.py)
        "epoch_stats": {"loss_sum": st.loss_sum.cpu()},
        **({"online_probe": run.probe.checkpoint_state()} if run.probe is not None else {}),
        **({"epoch_record": dict(st.pending)} if st.pending is not None else {}),
        **({"provenance": run.provenance.snapshot()} if run.provenance is not None else {}),
        **({"train_set": run.data.identity} if run.data.identity is not None else {}),
    }


def save(run: Run, also_epoch: bool = False, *, checked: bool = False) -> None:
    """Rank 0 writes ``last.pt`` (and ``epoch_N.pt``); never a state that has seen a bad loss
    (``checked``: the caller has just run :func:`~pretrain.engine.report.check_finite`)."""
    if not checked:
        check_finite(run)
    if dist.is_main():
        write_checkpoint(run, also_epoch)
    dist.barrier()
    run.state.saved_step = run.state.global_step


def write_checkpoint(run: Run, also_epoch: bool = False) -> None:
    """The files of :func:`save` (rank 0), without its collectives."""
    ckpt_dir = run.run_dir / "checkpoints"
    state = state_dict(run)
    save_file(state, ckpt_dir / "last.pt", run.run_dir)
    if also_epoch:
        save_file(state, ckpt_dir / f"epoch_{run.state.epoch}.pt", run.run_dir)


def restore(run: Run, state: dict[str, Any], path: Path | None = None) -> None:
    """Load ``state`` (a checkpoint of this run) into ``run``; a config that differs in a key
    outside :data:`RESUMABLE_CHANGES` is refused (exit 2)."""
    path = path or run.run_dir / "checkpoints" / "last.pt"
    missing = [k for k in RESUME_KEYS if k not in state]
    missing += ["online_probe"] if run.probe is not None and "online_probe" not in state else []
    if missing:
        raise CheckpointError(
            f"checkpoint {path} lacks {', '.join(missing)}: it cannot resume training (python -m "
            "linear_eval can still evaluate it); move it away to start afresh, or resume from an "
            "older copy (checkpoints/epoch_N.pt)"
        )
    check_same_config(run, state)
    changed_data = identity.resume_problem(state.get("train_set"), run.data.identity or {})
    if changed_data and not run.cfg.data.resume_on_changed_data:
        raise ConfigError(f"{run.run_dir}: {changed_data}")
    if changed_data:
        warn(
            f"{run.run_dir}: {identity.change(state.get('train_set'), run.data.identity or {})}; "
            "resuming anyway (data.resume_on_changed_data=true) at epoch "
            f"{state['epoch'] + 1} step {state['step_in_epoch']}, where an epoch is now "
            f"{run.derived.steps_per_epoch} steps: the epoch in progress ends with the steps it "
            "ran, and its loss is their mean"
        )
    load_module(run.moco, state["model"], "model")
    load_module(run.queue, state["queue"], "queue")
    load_module(run.strategy, state.get("strategy", {}), "negative strategy")
    loss_state = state.get("loss", state.get("objective", {}))  # OLD_CHECKPOINTS_READ_UNTIL
    load_module(run.loss_fn, loss_state, "loss")
    if run.probe is not None:
        run.probe.load_checkpoint_state(state["online_probe"])
    try:
        run.optimizer.load_state_dict(state["optimizer"])
        load_scaler(run.scaler, state["scaler"])
    except (ValueError, KeyError, RuntimeError) as e:
        raise CheckpointError(f"optimizer state does not fit this model: {e}") from None
    set_rng_state(state["rng"])
    st = run.state
    st.epoch, st.step_in_epoch = state["epoch"], state["step_in_epoch"]
    st.global_step = st.saved_step = state["global_step"]
    st.loss_sum = state["epoch_stats"]["loss_sum"].to(run.device)  # the rest stays on the CPU
    st.pending = state.get("epoch_record")


def check_same_config(run: Run, state: dict[str, Any]) -> None:
    """The checkpoint's config equals the run's but for :data:`RESUMABLE_CHANGES` and what the
    world-size rule (:mod:`pretrain.engine.world`) allows; else a :class:`ConfigError`."""
    check_same_plugins(run, state["config"].get("plugins") or [])
    # no augment_on: the per-sample path (OLD_CHECKPOINTS_READ_UNTIL)
    raw = {**state["config"], "data": {"augment_on": "workers", **state["config"]["data"]}}
    saved = config.from_dict(raw, source="the checkpoint's config")
    changed = diff(config.to_dict(saved), config.to_dict(run.cfg))
    refused = [k for k in changed if not k.startswith(RESUMABLE_CHANGES)]
    refused += [k for k in changed if k == "eval.online_probe"]  # its state is in the run
    problem = world.resume_problem(saved, state.get("world_size"), run.cfg, dist.world_size())
    if problem:
        raise ConfigError(f"{run.run_dir}: {problem}")
    refused = [k for k in refused if k != "model.bn_splits"]  # the world-size rule decided
    if refused:
        raise ConfigError(
            f"{run.run_dir} holds a run with a different config ({', '.join(refused)} differ); "
            "resume with the same settings or choose a new out_dir"
        )


def check_same_plugins(run: Run, saved: Any) -> None:
    """The checkpoint's ``plugins`` equal the run's (which :func:`pretrain.config.load` imported
    from the config given), compared as text before anything else: nothing the checkpoint names
    is imported, so a planted ``last.pt`` cannot run a file or module of its choosing."""
    if list(saved) != list(run.cfg.plugins):
        raise ConfigError(
            f"{run.run_dir} holds a run trained with plugins={json.dumps(saved, default=str)} "
            f"but the config gives plugins={json.dumps(list(run.cfg.plugins))}; a checkpoint's "
            "plugins are never imported from it: give the same plugins in the config to resume, "
            "or choose a new out_dir"
        )


def diff(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two nested dicts (``kwargs`` compared whole)."""
    keys = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict) and k != "kwargs":
            keys += diff(va, vb, f"{prefix}{k}.")
        elif va != vb:
            keys.append(f"{prefix}{k}")
    return keys


def check_epochs_left(run: Run) -> None:
    """A resume with fewer ``train.epochs`` than the run has done is refused (exit 2) before
    anything is written: ``config.yaml`` would claim a length the checkpoint has passed."""
    st, epochs = run.state, run.cfg.train.epochs
    if st.epoch > epochs or (st.epoch == epochs and st.step_in_epoch > 0):
        done = f"{st.epoch} epochs" + (f" and {st.step_in_epoch} steps" if st.step_in_epoch else "")
        raise ConfigError(
            f"train.epochs={epochs} is below what {run.run_dir} has done already ({done}); the "
            f"run is not shortened and its config.yaml is kept. Give train.epochs={st.epoch + 1} "
            f"or more to go on, or evaluate it as it is (python -m linear_eval --ckpt "
            f"{run.run_dir / 'checkpoints' / 'last.pt'})"
        )


def load_scaler(scaler: torch.amp.GradScaler, state: dict[str, Any]) -> None:
    """Load a GradScaler's state; an empty one (saved by a disabled scaler: a CPU run, or amp
    bf16/off) leaves an enabled scaler at its initial scale, as a fresh fp16 run starts."""
    if not state and scaler.is_enabled():
        return
    scaler.load_state_dict(state)


def rng_state() -> dict[str, Any]:
    """Every RNG the run draws from, as tensors and plain containers."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        # this rank's device only: every rank shares the seed, so rank 0's state fits them all
        "cuda": [torch.cuda.get_rng_state()] if dist.device_type() == "cuda" else [],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "python": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and dist.device_type() == "cuda":
        torch.cuda.set_rng_state(state["cuda"][0])  # into this rank's current device
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


class StopSignals:
    """Turns SIGTERM, SIGUSR2 and SIGINT into a flag the training loop reads at step boundaries.

    The loop then writes a checkpoint at the current step and returns, so a preempted job loses
    at most the step in flight. A second SIGINT interrupts at once (the user really means it).
    """

    SIGNALS = (signal.SIGTERM, signal.SIGUSR2, signal.SIGINT)

    def __init__(self, leaving: bool = False) -> None:
        """``leaving``: the process ends after the block (``python -m pretrain``): on leaving it
        the signals are ignored, not handed back, so one that arrives while the process exits
        cannot turn a run that finished or saved its checkpoint into 143 or 130."""
        self.received: int | None = None
        self.leaving = leaving
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.received == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signum
        stop_request.request()  # for loops inside a step that poll it (MiOC's solver)

    @property
    def stop(self) -> bool:
        return self.received is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received else ""

    def forward(self, signum: int | None = None) -> None:
        """Hand a received SIGTERM/SIGUSR2 (or ``signum``: the signal another rank received) on
        to the handler that was installed before ours.

        Under submitit that handler calls the task's ``checkpoint()`` and requeues the job: the
        engine forwards only after its own checkpoint is on disk. A default or ignored handler is
        not called (a plain run just exits cleanly), and Ctrl-C is never forwarded.
        """
        signum = signum or self.received
        previous = self._previous.get(signum) if signum else None
        if signum != signal.SIGINT and callable(previous):
            previous(signum, None)

    def __enter__(self) -> StopSignals:
        stop_request.clear()
        for sig in self.SIGNALS:
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: signals cannot be caught here
                pass
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_IGN if self.leaving else handler)
        stop_request.clear()
