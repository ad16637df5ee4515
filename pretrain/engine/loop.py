"""The training loop: start or resume, then epochs (the steps, the epoch's checkpoint, then its
evaluation) until done or stopped. Nothing here knows about a particular negative strategy or loss.

    python -m pretrain --cfg digits_moco.yaml out_dir=runs/digits

Setup is :mod:`pretrain.engine.setup`, the step :mod:`pretrain.engine.step`, checkpoints and
resume :mod:`pretrain.engine.checkpoint`, the epoch's evaluation :mod:`pretrain.engine.monitor`,
console and metrics lines :mod:`pretrain.engine.report`.
"""

from __future__ import annotations

import enum
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch

from negmine_core.contract.watch import StepContractError
from negmine_core.step import Batch
from pretrain.config import Config
from pretrain.data import imagefiles
from pretrain.engine import checkpoint, monitor
from pretrain.engine.checkpoint import (
    check_epochs_left,
    epochs_dependence,
    restore,
    save,
    write_checkpoint,
)
from pretrain.engine.report import (
    NonFiniteLossError,
    already_complete,
    announce,
    check_finite,
    finished,
    last_good,
    log_step,
    print_epoch,
)
from pretrain.engine.run import Run
from pretrain.engine.schedules import learning_rate
from pretrain.engine.setup import setup
from pretrain.engine.step import train_step
from pretrain.runtime import checkpoint_io, dist, plugin_provenance, provenance
from pretrain.runtime.checkpoint_io import CheckpointError
from pretrain.runtime.progress import Progress


class Stop(enum.Enum):
    """Why :func:`train_one_epoch` returned."""

    EPOCH_END = "the epoch's last step ran"
    SIGNAL = "a stop signal reached some rank"
    MAX_STEPS = "train.max_steps reached mid-epoch"


def run_training(
    cfg: Config, config_file: str | Path | None = None, *, leaving: bool = False
) -> int:
    """Train ``cfg`` to completion, resuming from ``out_dir/checkpoints/last.pt`` if present.
    ``config_file``: the file ``cfg`` was loaded from (its sha256 goes into the provenance).

    Returns the exit status: 0 when finished or stopped cleanly by SIGTERM/SIGUSR2 (checkpoint
    written), 130 after Ctrl-C (checkpoint written). From the start of training to the return, a
    stop signal is a flag (:class:`checkpoint.StopSignals`): one that arrives after the last
    step, while the run closes, leaves the status as it is. ``leaving``: the process ends after
    this (``python -m pretrain``), so the stop signals stay ignored after the return as well.
    """
    run = setup(cfg)
    run.provenance = provenance.start(run.run_dir, run.device, plugins_of(cfg), config_file)
    with checkpoint.StopSignals(leaving=leaving) as stop:
        try:
            return train(run, stop)
        finally:
            provenance.finish(run.provenance, run.state.global_step)
            run.close()


def train(run: Run, stop: checkpoint.StopSignals) -> int:
    """The run after :func:`setup`: resume or start, then epochs until done or stopped. A
    strategy or loss that breaks the contract in a step stops it, saying where."""
    try:
        return epochs(run, stop)
    except StepContractError as e:
        st = run.state
        e.add_note(
            f"Training stopped at global step {st.global_step} (epoch {st.epoch + 1}): fix the "
            f"class named above; {last_good(run)}."
        )
        raise


def epochs(run: Run, stop: checkpoint.StopSignals) -> int:
    """:func:`train`'s loop."""
    if not start(run):  # the command of a finished run, again: said so, nothing rewritten
        return 0
    while run.state.epoch < run.cfg.train.epochs:
        if reached_max_steps(run):  # at an epoch boundary (or a rerun with the same limit)
            return stop_at_max_steps(run)
        tic = time.perf_counter()
        why = train_one_epoch(run, stop)
        if why is Stop.MAX_STEPS:
            return stop_at_max_steps(run)
        if why is Stop.SIGNAL:
            return stop_on_signal(run, stop)
        save_epoch_checkpoint(run, time.perf_counter() - tic)
        evaluate_epoch(run, run.state.pending)
        run.state.pending = None
    if dist.is_main():  # a stop signal from here on changes nothing: the run is complete
        print(finished(run.run_dir, run.cfg.train.epochs), flush=True)
    return 0


def start(run: Run) -> bool:
    """Resume from ``last.pt`` (or prepare a fresh run), print the start, and finish the
    evaluation of an epoch that a failure cut short. False: the run is complete already."""
    last = run.run_dir / "checkpoints" / "last.pt"
    resumed = last.exists() or last.is_symlink()
    if resumed:  # RNG states must stay on the CPU
        restore(run, checkpoint_io.load(last, map_location="cpu"), last)
        check_epochs_left(run)
        run.log.truncate(run.state.global_step)
        if is_complete(run):
            if dist.is_main():
                fixed = bool(epochs_dependence(run.cfg))
                print(already_complete(run.run_dir, run.cfg.train.epochs, fixed), flush=True)
            return False
    announce(run, resumed)
    st = run.state
    if st.pending is not None and dist.any_rank(not run.log.has(st.pending)):
        evaluate_epoch(run, st.pending)  # the evaluation a failure cut short, before going on
    st.pending = None
    return True


def is_complete(run: Run) -> bool:
    """A resumed run that has trained and evaluated every epoch (every rank agrees)."""
    st = run.state
    done = st.epoch >= run.cfg.train.epochs and st.step_in_epoch == 0
    return done and not dist.any_rank(st.pending is not None and not run.log.has(st.pending))


def train_one_epoch(run: Run, stop: checkpoint.StopSignals) -> Stop:
    """Train from ``run.state`` to the end of its epoch, or until a stop signal or
    ``train.max_steps``; returns which."""
    st, steps = run.state, run.derived.steps_per_epoch
    run.data.sampler.set_epoch(st.epoch, st.step_in_epoch)
    run.moco.train()
    show = run.cfg.train.progress_bar and dist.is_main()
    bar = Progress(epoch=st.epoch + 1, steps=steps, start=st.step_in_epoch, show=show)
    tic, images, why = time.perf_counter(), 0, Stop.EPOCH_END
    for item in bar.batches(run.data.train_loader):
        epoch_f = st.epoch + st.step_in_epoch / steps
        lr = set_lr(run, epoch_f)
        batch = Batch.from_loader(item).to(run.device)  # pinned: a non-blocking upload
        loss = (run.graph or train_step)(run, batch, epoch_f)
        st.loss_sum += loss.detach()
        st.bad_loss |= ~torch.isfinite(loss.detach())  # checked at log steps: no per-step sync
        st.step_in_epoch += 1
        st.global_step += 1
        images += batch.y.shape[0] * dist.world_size()
        bar.update()
        if st.global_step % run.cfg.train.log_every == 0:
            tic, images = log_step(run, loss, lr, epoch_f, images, tic, bar), 0
        if dist.any_rank(stop.stop):  # all ranks stop at the same step (gloo, no CUDA sync)
            why = Stop.SIGNAL
            break
        if reached_max_steps(run):
            why = Stop.MAX_STEPS
            break
    bar.close()
    if st.step_in_epoch < steps:
        return why
    # the epoch's last step ran: a stop signal (then or since) saves before the kNN monitor, and
    # the resume (step_in_epoch == steps) goes straight to the epoch's end
    return Stop.SIGNAL if dist.any_rank(stop.stop) else Stop.EPOCH_END


def set_lr(run: Run, epoch: float) -> float:
    """The schedule's lr at fractional ``epoch`` (:mod:`pretrain.engine.schedules`), set on every
    parameter group."""
    t = run.cfg.train
    lr = learning_rate(
        epoch + t.lr_first_epoch,
        run.derived.lr,
        t.epochs,
        t.warmup_epochs,
        t.lr_schedule,
        t.lr_milestones,
        t.lr_per_epoch,
    )
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    return lr


def reached_max_steps(run: Run) -> bool:
    return 0 < run.cfg.train.max_steps <= run.state.global_step


def save_epoch_checkpoint(run: Run, seconds: float) -> None:
    """The finished epoch: one non-finite check, its record (held in ``run.state.pending`` until
    :func:`evaluate_epoch` has logged it), then its checkpoint (every ``train.ckpt_every``), before
    the evaluation: a failed evaluation loses no training (it is redone)."""
    cfg, st = run.cfg, run.state
    check_finite(run)
    st.pending = epoch_record(run, seconds)
    st.epoch, st.step_in_epoch = st.epoch + 1, 0
    st.loss_sum.zero_()
    if st.epoch == cfg.train.epochs or st.epoch % cfg.train.ckpt_every == 0:
        keep = cfg.train.keep_every > 0 and st.epoch % cfg.train.keep_every == 0
        save(run, also_epoch=keep, checked=True)


def epoch_record(run: Run, seconds: float) -> dict[str, Any]:
    """The finished epoch's line of ``metrics.jsonl`` before its evaluation: taken before the
    epoch's checkpoint, which holds it until :func:`evaluate_epoch` has logged it."""
    st = run.state
    record: dict[str, Any] = {
        "kind": "epoch",
        "epoch": st.epoch + 1,
        "global_step": st.global_step,
        # the mean over the steps that ran: the epoch's steps, or (a resume on a changed
        # training set, data.resume_on_changed_data) those before and after the resume
        "loss": st.loss_sum.item() / max(st.step_in_epoch, 1),
        "epoch_time_s": seconds,
    }
    if run.data.skipped is not None:  # data.skip_bad_images: also when no step line printed it
        record["skipped_images"] = int(run.data.skipped.sum())
    if run.probe is not None:  # "online": not the offline linear probe of linear_eval
        record["online_train_top1"] = run.probe.take_train_top1()  # rank 0's shard
    return record


def evaluate_epoch(run: Run, record: dict[str, Any]) -> None:
    """Evaluate the epoch of ``record`` after its checkpoint (:func:`monitor.measure_epoch`), then
    log and print it. The global RNG is restored afterwards, so a rerun that redoes the evaluation
    trains on bit-identically. If the evaluation fails, a checkpoint of the finished epoch is
    written first (when ``train.ckpt_every`` skipped it) and the error says so."""
    rng = checkpoint.rng_state()
    try:
        record = monitor.measure_epoch(run, dict(record))
    except Exception as e:
        st, last = run.state, run.run_dir / "checkpoints" / "last.pt"
        if dist.is_main():
            saved = st.saved_step == st.global_step
            if not saved:  # train.ckpt_every skipped this epoch: write it now
                try:
                    write_checkpoint(run)
                    saved = True
                except CheckpointError as w:
                    e.add_note(f"The epoch's checkpoint could not be written either: {w}")
            if saved:
                e.add_note(
                    f"The checkpoint of epoch {record['epoch']} is saved ({last}): fix the cause "
                    "and run the same command; it evaluates that epoch and goes on."
                )
        raise
    checkpoint.set_rng_state(rng)
    print_epoch(record)


def stop_on_signal(run: Run, stop: checkpoint.StopSignals) -> int:
    """A stop signal on any rank: checkpoint at this step, hand the signal on, exit 0 (130 after
    Ctrl-C). A rank that was not signalled itself stops as for SIGTERM."""
    save(run)
    signum = stop.received or signal.SIGTERM
    if dist.is_main():
        st = run.state
        print(
            f"\n{signal.Signals(signum).name}: checkpoint saved at epoch {st.epoch + 1} step "
            f"{st.step_in_epoch}/{run.derived.steps_per_epoch}; run the same command to resume",
            flush=True,
        )
    run.log.close()
    stop.forward(signum)  # e.g. submitit: checkpoint() + requeue; returns for a plain run
    return 130 if signum == signal.SIGINT else 0


def stop_at_max_steps(run: Run) -> int:
    """``train.max_steps`` reached: checkpoint as a stop signal would, then exit 0."""
    if run.state.saved_step != run.state.global_step:
        save(run)
    if dist.is_main():
        print(
            f"train.max_steps={run.cfg.train.max_steps} reached: checkpoint saved at global step "
            f"{run.state.global_step} (epoch {run.state.epoch + 1} step "
            f"{run.state.step_in_epoch}); raise train.max_steps (0 = no limit) and run the same "
            "command to continue",
            flush=True,
        )
    run.log.close()
    return 0


def plugins_of(cfg: Config) -> list[dict[str, Any]]:
    """The provenance records of the run's strategy and loss where they are plugins."""
    import negatives
    from pretrain import losses

    out = []
    for kind, name, registry in (
        ("strategy", cfg.negatives.name, negatives.strategies),
        ("loss", cfg.loss.name, losses.registry),
    ):
        made = plugin_provenance.record(kind, name, registry.get(name), registry.group)
        if made is not None:
            out.append(made)
    return out


def main(cfg: Config, config_file: str | Path | None = None, *, leaving: bool = False) -> int:
    """The command's run: its exit status, 1 for errors of the run itself (2 is the CLI's, for
    config errors). ``config_file``: the file given to ``--cfg``, None for a config built in
    code; ``leaving``: see :func:`run_training`."""
    try:
        return run_training(cfg, config_file, leaving=leaving)
    except (CheckpointError, NonFiniteLossError, StepContractError) as e:
        print(f"error: {e}{notes(e)}", file=sys.stderr)
        return 1
    except imagefiles.BadImageError as e:  # also when re-raised from a loader worker
        line = imagefiles.bad_image_line(e)
        print(
            f"error: {line}\nSet data.skip_bad_images=true to skip unreadable images "
            f"(each skip is counted in the log).{notes(e)}",
            file=sys.stderr,
        )
        return 1


def notes(e: BaseException) -> str:
    """What the run added to an error on its way out (e.g. which checkpoint is saved)."""
    return "".join(f"\n{note}" for note in getattr(e, "__notes__", ()))
