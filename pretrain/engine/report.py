"""What a run tells its user: the start line and ``derived.yaml``, a metrics line every
``train.log_every`` steps, the epoch line, the non-finite-loss check with its advice, and the last
line: its final metrics and where its checkpoint and metrics are, when it finishes and when its
command is run again after it finished (nothing is trained or rewritten)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from pretrain import config
from pretrain.engine.run import Run
from pretrain.runtime import cores, dist, run_folder
from pretrain.runtime.progress import Progress


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or inf; the last checkpoint on disk is from before it."""


def announce(run: Run, resumed: bool) -> None:
    """Rank 0 writes the resolved ``config.yaml`` and ``derived.yaml`` and prints the start."""
    if not dist.is_main():
        return
    derived = run.derived.as_dict()
    run_folder.write_text(run.run_dir / "config.yaml", config.dump(run.cfg), run.run_dir)
    derived_text = yaml.safe_dump(derived, sort_keys=False)
    run_folder.write_text(run.run_dir / "derived.yaml", derived_text, run.run_dir)
    print("derived:", yaml.safe_dump(derived, sort_keys=False, default_flow_style=True), end="")
    if run.data.num_workers < run.cfg.data.num_workers:
        print(
            f"data.num_workers {run.cfg.data.num_workers} capped at {run.data.num_workers}: this "
            f"rank may use {cores.per_rank()} core(s) (one is the training process's)"
        )
    st = run.state
    print(
        f"{'resuming at' if resumed else 'starting'} epoch {st.epoch + 1} step {st.step_in_epoch} "
        f"on {run.device}; run directory {run.run_dir} (resolved config: "
        f"{run.run_dir / 'config.yaml'})",
        flush=True,
    )


def log_step(
    run: Run, loss: torch.Tensor, lr: float, epoch: float, images: int, tic: float, bar: Progress
) -> float:
    """A metrics line every ``train.log_every`` steps: the only host syncs of the loop.

    The interval's wall time is read after the loss is (a sync): the steps a captured or an
    asynchronous step has queued on the device are inside it, so ``images_per_s`` is the
    throughput, not the host's launch rate. ``tic`` is the previous log step's return value
    (also after its sync); returns this one's."""
    check_finite(run)
    value = loss.item()  # waits for the device: every step of the interval has run
    dt = time.perf_counter() - tic
    record = {
        "kind": "step",
        "global_step": run.state.global_step,
        "epoch": round(epoch, 4),
        "loss": value,
        "lr": lr,
        "images_per_s": images / dt,
        "step_time_s": dt * run.cfg.train.batch_size / images,  # images counted over all ranks
        "data_wait_frac": min(1.0, bar.take_wait() / dt),  # this rank's wait on its loader
    }
    if run.data.skipped is not None:  # data.skip_bad_images: this rank's skips so far
        record["skipped_images"] = int(run.data.skipped.sum())
    for key, value in run.strategy.diagnostics().items():  # numbers, or a label (a str)
        record[f"neg_{key}"] = value if isinstance(value, str) else float(value)
    for key, value in run.loss_fn.diagnostics().items():
        record[f"loss_{key}"] = float(value)
    run.log.write(record, "train")
    for key, values in run.loss_fn.histograms().items():
        run.log.histogram(f"train/{key}", values, run.state.global_step)
    total = run.derived.total_steps
    if run.cfg.train.max_steps:
        total = min(total, run.cfg.train.max_steps)
    bar.report(
        record, step_in_epoch=run.state.step_in_epoch, steps_left=total - run.state.global_step
    )
    return time.perf_counter()


def print_epoch(record: dict[str, Any]) -> None:
    """The epoch's line on the console (rank 0)."""
    if dist.is_main():
        print(
            " ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                for k, v in record.items()
                if k != "kind"
            ),
            flush=True,
        )


def check_finite(run: Run) -> None:
    """Stop every rank (one collective) if any rank has seen a non-finite loss; at the first log
    step, first the first step's records (a strategy's non-finite negatives named before any
    advice on the learning rate)."""
    if run.watch is not None:
        run.watch.at_log(run.state.global_step)
    if dist.any_rank(bool(run.state.bad_loss)):  # a NaN on one rank stops every rank here
        # the strategy run again, on this failure only
        fault = run.watch.strategy_fault(run.strategy) if run.watch is not None else ""
        if fault:
            raise NonFiniteLossError(f"{fault}; {stopped(run)}.")
        cause = run.strategy.bad_input()  # e.g. MiOC's non-finite embeddings
        raise NonFiniteLossError(cause + divergence_message(run))


def last_good(run: Run) -> str:
    """Which checkpoint (if any) holds the last good state."""
    st, last = run.state, run.run_dir / "checkpoints" / "last.pt"
    if st.saved_step >= 0 and last.exists():
        return (
            f"{last} (global step {st.saved_step}) is the last good state; re-running the same "
            "command resumes from it"
        )
    return "no checkpoint was written before it (re-running starts afresh)"


def stopped(run: Run) -> str:
    """When the loss became non-finite and which checkpoint (if any) holds the last good state."""
    st, where = run.state, last_good(run)
    return (
        f"non-finite loss at or before global step {st.global_step} (epoch {st.epoch + 1}); "
        f"training stopped. {where}"
    )


def divergence_message(run: Run) -> str:
    """What went wrong, which checkpoint (if any) holds the last good state, and advice that
    applies on this device."""
    advice = ["lower train.base_lr (or add train.warmup_epochs)", "check the data"]
    if isinstance(run.autocast(), torch.autocast):  # reduced precision is active here
        if run.cfg.train.amp == "fp16":
            advice.insert(1, "use train.amp=bf16 (fp16 overflows more easily)")
        advice.insert(1, "try train.amp=off (full fp32) to rule out reduced precision")
    return f"{stopped(run)}. Advice: {'; '.join(advice)}."


# the epoch record's numbers that a closing line shows (the evaluation's, and the epoch's loss)
SHOWN = ("loss", "knn_top1", "oc_auroc", "online_train_top1", "online_test_top1")


def last_epoch(run_dir: Path) -> dict[str, Any] | None:
    """The last ``kind: epoch`` line of ``RUN/metrics.jsonl`` (None if there is none)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return None
    last = None
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a hard kill
            continue
        if record.get("kind") == "epoch":
            last = record
    return last


def metrics(record: dict[str, Any] | None) -> str:
    """``epoch N: loss=... knn_top1=...`` of an epoch record ('no epoch logged' without one)."""
    if record is None:
        return "no epoch logged"
    shown = [k for k in record if k in SHOWN or k.startswith("knn_top1_")]
    values = " ".join(
        f"{k}={record[k]:.4g}" if isinstance(record[k], float) else f"{k}={record[k]}"
        for k in shown
    )
    return f"epoch {record.get('epoch')}: {values}"


def finished(run_dir: Path, epochs: int) -> str:
    """The closing line of a run that trained to its end."""
    ckpt = run_dir / "checkpoints" / "last.pt"
    return (
        f"run complete ({epochs} epoch{'s' * (epochs != 1)}): {metrics(last_epoch(run_dir))}; "
        f"checkpoint {ckpt}; metrics {run_dir / 'metrics.jsonl'}"
    )


def already_complete(run_dir: Path, epochs: int, fixed_length: bool = False) -> str:
    """The line of a command run again on a run that has finished: nothing is done.
    ``fixed_length``: its schedule depends on ``train.epochs``, which a resume cannot raise
    (:func:`pretrain.engine.checkpoint.check_same_schedule`)."""
    ckpt = run_dir / "checkpoints" / "last.pt"
    go_on = (
        "Its schedule has ended (train.epochs cannot be raised on resume: a longer run is a new "
        "out_dir)"
        if fixed_length
        else "Raise train.epochs to train on"
    )
    return (
        f"{run_dir} is complete ({epochs} of {epochs} epochs trained); nothing to do. "
        f"{metrics(last_epoch(run_dir))}; checkpoint {ckpt}; metrics {run_dir / 'metrics.jsonl'}. "
        f"{go_on}, or evaluate it: python -m linear_eval --ckpt {ckpt}"
    )
