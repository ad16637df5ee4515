"""A run's checkpoint and its resume: what it holds (:func:`state_dict`, the RNGs of
:func:`rng_state`), writing it (:func:`save`) and reading it back (:func:`restore`), with the config
changes a resume may make (:data:`RESUMABLE_CHANGES`); and the stop signals that make the loop
checkpoint and return (:class:`StopSignals`). The file format (atomic writes, weights-only reads,
:class:`CheckpointError`) is :mod:`pretrain.runtime.checkpoint_io`."""

from __future__ import annotations

import json
import math
import random
import signal
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import torch

from negmine_core import stop as stop_request
from pretrain import config, losses
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
# (tests/pretrain/engine/test_checkpoint.py fails once the version reaches it).
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
    check_same_plugin_code(run, state.get("provenance"))
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
    check_same_schedule(run, saved, state)


#: :func:`epochs_dependence`'s reason for the cosine schedule
COSINE = "its lr schedule (train.lr_schedule=cosine) decays to 0 over train.epochs"


def epochs_dependence(cfg: config.Config) -> list[str]:
    """Why the run's training depends on ``train.epochs`` beyond where it stops (none: it does
    not): the cosine schedule decays over it (:func:`pretrain.engine.schedules.learning_rate`;
    the step schedule's milestones and the warm-up do not read it), and a loss that takes it
    (``Loss.from_run``, e.g. HCL's annealing) spreads its own schedule over it."""
    why = [COSINE] if cfg.train.lr_schedule == "cosine" else []
    if "epochs" in losses.registry.get(cfg.loss.name).from_run:
        why.append(f"loss {cfg.loss.name!r} takes train.epochs (its own schedule)")
    return why


def cosine_has_decayed(cfg: config.Config, epoch: int, step_in_epoch: int, steps: int) -> bool:
    """Whether a step done so far (``epoch`` whole epochs and ``step_in_epoch`` steps of
    ``steps``) read the cosine at t != 0, where its value depends on ``train.epochs``. In the
    warm-up and at the cosine's start (t = 0) the lr is the same for any length (MoCo's
    per-epoch lr: all of epoch 0), so such a run may still be given another length.

    A step reads the epoch of :func:`pretrain.engine.loop.set_lr`, which grows with the step:
    the warm-up while it is below ``warmup_epochs``, then the cosine at the (floored, per
    epoch) epoch; that epoch is whole, so it equals ``warmup_epochs`` only where the warm-up
    is whole. Hence the last step done decides."""
    if epoch == 0 and step_in_epoch == 0:
        return False
    t = cfg.train
    last = epoch + (step_in_epoch - 1) / steps if step_in_epoch else epoch - 1 + (steps - 1) / steps
    read = last + t.lr_first_epoch
    at = math.floor(read) if t.lr_per_epoch else read
    return read >= t.warmup_epochs and at != t.warmup_epochs


def check_same_schedule(run: Run, saved: config.Config, state: dict[str, Any]) -> None:
    """A resume with another ``train.epochs`` where the steps done already depend on it
    (:func:`epochs_dependence`; for the cosine alone, :func:`cosine_has_decayed`) is refused:
    the steps left would follow another schedule than the steps done, and the folder would
    claim one run of the new length. (Fewer epochs than done is :func:`check_epochs_left`'s
    refusal.)"""
    old, new = saved.train.epochs, run.cfg.train.epochs
    epoch, step = state["epoch"], state["step_in_epoch"]
    below = epoch > new or (epoch == new and step > 0)
    why = epochs_dependence(run.cfg)
    if old == new or below or not why:
        return
    steps = max(run.derived.steps_per_epoch, 1)
    if why == [COSINE] and not cosine_has_decayed(run.cfg, epoch, step, steps):
        return
    raise ConfigError(
        f"train.epochs={new} differs from the {old} epochs {run.run_dir} was started with, and "
        f"{' and '.join(why)}: the steps left would follow another schedule than the steps "
        f"done, and the folder would claim a {new}-epoch run. Resume with "
        f"train.epochs={old}, or train {new} epochs in a new out_dir (train.lr_schedule=step "
        "does not depend on train.epochs)"
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


def check_same_plugin_code(run: Run, saved: Any) -> None:
    """The plugin code the checkpoint's last segment ran (its provenance records,
    :mod:`pretrain.runtime.plugin_provenance`) is the code this run loaded, by a plugin file's
    sha256: a file edited between the stop and the resume is refused, naming it and both
    digests' prefixes (a record a checkpoint lacks is not compared; an installed plugin's
    version is recorded but not compared)."""
    segments = saved.get("segments") if isinstance(saved, dict) else None
    last = segments[-1] if isinstance(segments, list) and segments else None
    then = last.get("plugins") if isinstance(last, dict) else None
    now = run.provenance.segment.get("plugins") if run.provenance is not None else None
    if not isinstance(then, list) or not isinstance(now, list):
        return
    for old in [r for r in then if isinstance(r, dict)]:
        key = (old.get("kind"), old.get("name"))
        new = next((r for r in now if (r.get("kind"), r.get("name")) == key), None)
        if new is None:
            continue  # another name: the config check names it
        what = f"the {old.get('kind')} plugin {old.get('name')!r}"
        if old.get("sha256") and new.get("sha256") and old["sha256"] != new["sha256"]:
            raise ConfigError(
                f"{run.run_dir}: {what} in {new.get('file')} changed since the checkpoint "
                f"(sha256:{str(old['sha256'])[:12]} then, sha256:{new['sha256'][:12]} now): the "
                "steps left would run other code than the steps done. Restore the file as it "
                "was to resume, or choose a new out_dir"
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
