"""The training loop: one epoch that fits on a screen, and the run around it (resume, evaluate,
checkpoint). Nothing here knows about a particular negative strategy or loss.

    python -m pretrain --cfg digits_moco.yaml out_dir=runs/digits
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from negatives.base import StrategyInputs
from pretrain import config
from pretrain.config import Config, ConfigError
from pretrain.data import identity, imagefiles
from pretrain.engine import build, checkpoint, closing, cuda_graphs, knn, runlock, world
from pretrain.engine.online_probe import OnlineProbe
from pretrain.engine.schedules import learning_rate
from pretrain.losses import Loss, StepTensors
from pretrain.runtime import cores, dist, precision, provenance, threads
from pretrain.runtime.metrics_log import MetricsLog
from pretrain.runtime.progress import Progress
from pretrain.runtime.triton_env import triton_interpreted

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


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or inf; the last checkpoint on disk is from before it."""


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
    """Everything one training run holds; built by :func:`setup`, by keyword only."""

    cfg: Config
    info: dict[str, Any]
    device: torch.device
    moco: torch.nn.Module
    query: torch.nn.Module  # moco.encoder_q, or its DDP wrapper (state dicts stay unprefixed)
    queue: torch.nn.Module
    strategy: torch.nn.Module
    loss_fn: Loss
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    data: build.Data
    log: MetricsLog
    state: State
    probe: OnlineProbe | None = None  # eval.online_probe
    graph: cuda_graphs.CapturedStep | None = None  # train.cuda_graphs: train_step, captured
    lock: runlock.RunLock | None = None  # out_dir's lock, held by rank 0
    provenance: provenance.Provenance | None = None  # RUN/provenance.json, also in checkpoints

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


def train_one_epoch(run: Run, stop: checkpoint.StopSignals) -> bool:
    """Train from ``run.state`` to the end of its epoch; False if a stop signal or
    ``train.max_steps`` came first."""
    st, steps = run.state, run.info["steps_per_epoch"]
    run.data.sampler.set_epoch(st.epoch, st.step_in_epoch)
    run.moco.train()
    show = run.cfg.train.progress_bar and dist.is_main()
    bar = Progress(epoch=st.epoch + 1, steps=steps, start=st.step_in_epoch, show=show)
    tic, images = time.perf_counter(), 0
    for x1, x2, y, _, *rows in bar.batches(run.data.train_loader):  # rows: stage-2 parameters
        epoch_f = st.epoch + st.step_in_epoch / steps
        lr = set_lr(run, epoch_f)
        x1, x2, y, *rows = (t.to(run.device, non_blocking=True) for t in (x1, x2, y, *rows))
        loss = (run.graph or train_step)(run, x1, x2, y, epoch_f, *rows)
        st.loss_sum += loss.detach()
        st.bad_loss |= ~torch.isfinite(loss.detach())  # checked at log steps: no per-step sync
        st.step_in_epoch += 1
        st.global_step += 1
        images += x1.shape[0] * dist.world_size()
        bar.update()
        if st.global_step % run.cfg.train.log_every == 0:
            log_step(run, loss, lr, epoch_f, images, time.perf_counter() - tic, bar)
            tic, images = time.perf_counter(), 0
        if dist.any_rank(stop.stop):  # all ranks stop at the same step (gloo, no CUDA sync)
            stop.received = stop.received or signal.SIGTERM  # a rank that was not signalled
            break
        if reached_max_steps(run):
            break
    bar.close()
    return st.step_in_epoch >= steps


def reached_max_steps(run: Run) -> bool:
    return 0 < run.cfg.train.max_steps <= run.state.global_step


def train_step(
    run: Run,
    x1: torch.Tensor,
    x2: torch.Tensor,
    y: torch.Tensor,
    epoch: float,
    params: torch.Tensor | None = None,
    support: torch.Tensor | None = None,
) -> torch.Tensor:
    """One MoCo step (Algorithm 1 of He et al. 2020) with the strategy's extra negatives.
    ``params`` (N, 2 + V, P): with ``data.augment_on: device``, x1 and x2 are uint8 crops and the
    photometric ops run here, batched (stage 2, pretrain/data/augment.py); ``support`` (N, V, 3, S,
    S): ``data.support_views`` extra crops (FNC), their keys passed to the loss."""
    if params is not None:
        x = run.data.augment(torch.cat([x1, x2]), torch.cat([params[:, 0], params[:, 1]]))
        x1, x2 = x.chunk(2)  # (N, 3, S, S) each, normalised float
        if support is not None:  # sample-major rows, so BN splits / ranks hold whole samples
            support = run.data.augment(support.flatten(0, 1), params[:, 2:].flatten(0, 1))
    if precision.channels_last(run.cfg.train.channels_last, run.cfg.train.amp, run.device):
        x1, x2 = (x.contiguous(memory_format=torch.channels_last) for x in (x1, x2))
    x1, x2, y = run.strategy.transform_batch(x1, x2, y)
    x1 = run.loss_fn.transform_queries(x1)  # identity but for input-mixing losses (i-Mix)
    with run.autocast():  # the encoders only: negatives and the loss run in float32 below
        if run.cfg.loss.symmetric:  # both views through the query encoder in one batch (SupCon)
            splits = run.cfg.model.bn_splits
            z, kappa = run.query(pair_views(x1, x2, splits), with_kappa=True)  # (2N, D)
            (q, q2), (kappa_q, kappa_q2) = split_views(z, splits), split_views(kappa, splits)
        else:
            q, kappa_q = run.query(x1, with_kappa=True)  # queries (N, D); kappa (N,) or None
            q2 = kappa_q2 = None
        k, kappa_k = run.moco.keys(x2, run.cfg.moco.momentum, with_kappa=True)  # momentum first
        if support is not None:  # (N * V, D) -> (N, V, D), the updated key encoder, no grad
            support = run.moco.encode_keys(support).unflatten(0, (x2.shape[0], -1))
    q, q2, k, kappa_q, kappa_q2, kappa_k, support = map(
        precision.full, (q, q2, k, kappa_q, kappa_q2, kappa_k, support)
    )  # float32 from here
    k_all, y_all = dist.gather(k), dist.gather(y)  # (world*N, D): identity in one process
    if run.strategy.needs_global_batch:  # e.g. an OC-SVM fitted on the global batch
        seen_q, seen_k, seen_y = dist.gather(q.detach()), k_all, y_all
    else:
        seen_q, seen_k, seen_y = q.detach(), k, y
    extra = run.strategy.negatives(StrategyInputs(
        q=seen_q, k=seen_k, queue=run.queue.keys, queue_labels=run.queue.labels, labels=seen_y,
        epoch=epoch, global_step=run.state.global_step, rank=dist.rank(),
        world_size=dist.world_size()))  # fmt: skip
    step = StepTensors(q=q, k=k, k_all=k_all, labels=y, labels_all=y_all,
                       offset=dist.rank() * q.shape[0], queue=run.queue.keys,
                       queue_labels=run.queue.labels, extra=extra, kappa_q=kappa_q,
                       kappa_k=kappa_k, q2=q2, kappa_q2=kappa_q2, support=support, epoch=epoch,
                       global_step=run.state.global_step)  # fmt: skip
    loss = run.loss_fn(step)
    if run.probe is not None:  # view 1's backbone features, detached; its own optimizer
        feats = run.probe.features
        if run.cfg.loss.symmetric:
            feats = split_views(feats, run.cfg.model.bn_splits)[0]
        run.probe.train_step(feats, y)
    run.optimizer.zero_grad(set_to_none=True)
    run.scaler.scale(loss).backward()
    run.scaler.step(run.optimizer)
    run.scaler.update()
    run.queue.enqueue(k_all, y_all)  # after the logits (and backward); never synthetic points
    return loss


def pair_views(x1: torch.Tensor, x2: torch.Tensor, splits: int) -> torch.Tensor:
    """One (2N, ...) batch of both views whose BatchNorm split r holds [view 1; view 2] of the
    r-th chunk of images: what rank r forwards under DDP, so one process equals DDP."""
    return torch.cat([x1.unflatten(0, (splits, -1)), x2.unflatten(0, (splits, -1))], 1).flatten(
        0, 1
    )


def split_views(
    z: torch.Tensor | None, splits: int
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Inverse of :func:`pair_views` on the outputs: (view 1 rows, view 2 rows), or (None, None)."""
    if z is None:
        return None, None
    halves = z.unflatten(0, (splits, -1)).chunk(2, dim=1)
    return halves[0].flatten(0, 1), halves[1].flatten(0, 1)


def set_lr(run: Run, epoch: float) -> float:
    t = run.cfg.train
    lr = learning_rate(epoch + t.lr_first_epoch, run.info["lr"], t.epochs, t.warmup_epochs,
                       t.lr_schedule, t.lr_milestones, t.lr_per_epoch)  # fmt: skip
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    return lr


def log_step(
    run: Run, loss: torch.Tensor, lr: float, epoch: float, images: int, dt: float, bar: Progress
) -> None:
    """A metrics line every ``train.log_every`` steps: the only host syncs of the loop."""
    check_finite(run)
    record = {
        "kind": "step",
        "global_step": run.state.global_step,
        "epoch": round(epoch, 4),
        "loss": loss.item(),
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
    total = run.info["total_steps"]
    if run.cfg.train.max_steps:
        total = min(total, run.cfg.train.max_steps)
    bar.report(record, step_in_epoch=run.state.step_in_epoch,
               steps_left=total - run.state.global_step)  # fmt: skip


def check_finite(run: Run) -> None:
    if dist.any_rank(bool(run.state.bad_loss)):  # a NaN on one rank stops every rank here
        cause = run.strategy.bad_input()  # e.g. MiOC's non-finite embeddings
        raise NonFiniteLossError(cause + divergence_message(run))


def divergence_message(run: Run) -> str:
    """What went wrong, which checkpoint (if any) holds the last good state, and advice that
    applies on this device."""
    st, last = run.state, run.run_dir / "checkpoints" / "last.pt"
    where = (
        f"{last} (global step {st.saved_step}) is the last good state; re-running the same "
        "command resumes from it"
        if st.saved_step >= 0 and last.exists()
        else "no checkpoint was written before it (re-running starts afresh)"
    )
    advice = ["lower train.base_lr (or add train.warmup_epochs)", "check the data"]
    if isinstance(run.autocast(), torch.autocast):  # reduced precision is active here
        if run.cfg.train.amp == "fp16":
            advice.insert(1, "use train.amp=bf16 (fp16 overflows more easily)")
        advice.insert(1, "try train.amp=off (full fp32) to rule out reduced precision")
    return (
        f"non-finite loss at or before global step {st.global_step} (epoch {st.epoch + 1}); "
        f"training stopped. {where}. Advice: {'; '.join(advice)}."
    )


def evaluate(run: Run) -> dict[str, float]:
    """The monitor on the query encoder, training images as bank and held-out as queries (both
    under the eval transform): weighted kNN top-1 (%) on ``eval.knn_features`` (the pooled
    backbone, the head's output, or both in one pass; the first is ``knn_top1``), or for one-class
    runs (``data.in_classes``) the AUROC (%) of s_con (k=1) with the held-out images of those
    classes as in-distribution."""
    cfg = run.cfg
    taps = knn.Taps(run.moco.encoder_q, tuple(cfg.eval.knn_features.split("+")))
    bank, bank_y = knn.extract(taps, run.data.bank_loader, run.device)
    banks = taps.split(bank)
    test, test_y = knn.extract(taps, run.data.test_loader, run.device)
    tests = taps.split(test)
    first = taps.names[0]
    if run.data.in_classes:
        auroc = knn.one_class_auroc(banks[first], tests[first], test_y, run.data.in_classes, k=1)
        return {"oc_auroc": auroc}
    out = {}
    for name in taps.names:
        out[f"knn_top1_{name}"] = knn.knn_top1(banks[name], bank_y, tests[name], test_y,
                                               cfg.eval.knn_k, cfg.eval.knn_temperature,
                                               run.data.num_classes)  # fmt: skip
    out["knn_top1"] = out[f"knn_top1_{first}"]
    return out if len(taps.names) > 1 else {"knn_top1": out["knn_top1"]}


def init_loss(run: Run) -> None:
    """Class prototypes (CIDER) from the normalised head outputs of the training images, in
    eval mode, before the first step of a fresh run (every rank computes the same means)."""
    if run.loss_fn.needs_class_means:
        z, y = knn.extract(run.moco.encoder_q, run.data.bank_loader, run.device)
        run.loss_fn.init_class_means(z.to(run.device), y.to(run.device))


def state_dict(run: Run) -> dict[str, Any]:
    st = run.state
    return {
        "format": checkpoint.FORMAT,
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
        "rng": checkpoint.rng_state(),
        "world_size": dist.world_size(),  # checked on resume (pretrain/engine/world.py)
        "epoch_stats": {"loss_sum": st.loss_sum.cpu()},
        **({"online_probe": run.probe.checkpoint_state()} if run.probe is not None else {}),
        **({"epoch_record": dict(st.pending)} if st.pending is not None else {}),
        **({"provenance": run.provenance.snapshot()} if run.provenance is not None else {}),
        **({"train_set": run.data.identity} if run.data.identity is not None else {}),
    }


def save(run: Run, also_epoch: bool = False) -> None:
    """Rank 0 writes ``last.pt`` (and ``epoch_N.pt``); never a state that has seen a bad loss."""
    check_finite(run)
    if dist.is_main():
        write_checkpoint(run, also_epoch)
    dist.barrier()
    run.state.saved_step = run.state.global_step


def write_checkpoint(run: Run, also_epoch: bool = False) -> None:
    """The files of :func:`save` (rank 0), without its collectives."""
    ckpt_dir = run.run_dir / "checkpoints"
    state = state_dict(run)
    checkpoint.save(state, ckpt_dir / "last.pt")
    if also_epoch:
        checkpoint.save(state, ckpt_dir / f"epoch_{run.state.epoch}.pt")


# what restore reads besides checkpoint.REQUIRED (linear_eval needs none of these)
RESUME_KEYS = ("queue", "scaler", "epoch_stats")


def restore(run: Run, state: dict[str, Any], path: Path | None = None) -> None:
    path = path or run.run_dir / "checkpoints" / "last.pt"
    missing = [k for k in RESUME_KEYS if k not in state]
    missing += ["online_probe"] if run.probe is not None and "online_probe" not in state else []
    if missing:
        raise checkpoint.CheckpointError(
            f"checkpoint {path} lacks {', '.join(missing)}: it cannot resume training (python -m "
            "linear_eval can still evaluate it); move it away to start afresh, or resume from an "
            "older copy (checkpoints/epoch_N.pt)"
        )
    raw = {**state["config"], "data": {"augment_on": "workers", **state["config"]["data"]}}
    saved = config.from_dict(raw, source="the checkpoint's config")  # older runs: per-sample path
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
    changed_data = identity.resume_problem(state.get("train_set"), run.data.identity or {})
    if changed_data and not run.cfg.data.resume_on_changed_data:
        raise ConfigError(f"{run.run_dir}: {changed_data}")
    checkpoint.load_module(run.moco, state["model"], "model")
    checkpoint.load_module(run.queue, state["queue"], "queue")
    checkpoint.load_module(run.strategy, state.get("strategy", {}), "negative strategy")
    loss_state = state.get("loss", state.get("objective", {}))  # "objective": before 2026-11-24
    checkpoint.load_module(run.loss_fn, loss_state, "loss")
    if run.probe is not None:
        run.probe.load_checkpoint_state(state["online_probe"])
    try:
        run.optimizer.load_state_dict(state["optimizer"])
        checkpoint.load_scaler(run.scaler, state["scaler"])
    except (ValueError, KeyError, RuntimeError) as e:
        raise checkpoint.CheckpointError(f"optimizer state does not fit this model: {e}") from None
    checkpoint.set_rng_state(state["rng"])
    st = run.state
    st.epoch, st.step_in_epoch, st.global_step = (
        state["epoch"],
        state["step_in_epoch"],
        state["global_step"],
    )
    st.loss_sum = state["epoch_stats"]["loss_sum"].to(run.device)  # the rest stays on the CPU
    st.saved_step = st.global_step
    st.pending = state.get("epoch_record")


def diff(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict) and k != "kwargs":
            keys += diff(va, vb, f"{prefix}{k}.")
        elif va != vb:
            keys.append(f"{prefix}{k}")
    return keys


def setup(cfg: Config) -> Run:
    device = dist.init_from_env(timeout_min=cfg.train.dist_timeout_min)
    world.check(cfg, dist.world_size())  # every rank: exit 2, not a traceback at the first step
    refused = cfg.train.cuda_graphs and cuda_graphs.refusal(cfg, device.type, dist.world_size())
    if refused:
        raise ConfigError(f"config key 'train.cuda_graphs' = True is refused: {refused}; "
                          "set train.cuda_graphs=false")  # fmt: skip
    if cfg.model.split_bn == "triton" and not (device.type == "cuda" or triton_interpreted()):
        raise ConfigError(f"config key 'model.split_bn' = 'triton' needs a CUDA device (this run "
                          f"is on {device.type}); set model.split_bn=auto")  # fmt: skip
    check_run_dir(cfg)  # every rank, before any data is read
    lock = lock_run_dir(cfg)
    try:
        return build_run(cfg, device, lock)
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def build_run(cfg: Config, device: torch.device, lock: runlock.RunLock | None) -> Run:
    precision.amp_dtype(cfg.train.amp, device)  # fp16 on a CPU: a config error before any work
    threads.configure(cfg.train.threads, device)  # this rank's share of the cores
    if cfg.train.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    else:
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(cfg.seed + dist.rank())
    try:
        data = build.datasets_for(cfg, device)
    except OSError as e:  # e.g. an unreadable split folder (data errors of a layout: DatasetError)
        where = e.filename or cfg.data.root
        raise ConfigError(
            f"data.root {cfg.data.root}: cannot read {where} ({e.strerror or e}); make it "
            "readable for this user, or point data.root elsewhere"
        ) from None
    if data.augment is not None:
        data.augment.to(device)
    info = config.derived(cfg, len(data.train), dist.world_size())
    if info["steps_per_epoch"] < 1:
        raise ConfigError(f"train.batch_size {cfg.train.batch_size} exceeds the training set")
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank
    moco = build.model(cfg).to(device)
    if precision.channels_last(cfg.train.channels_last, cfg.train.amp, device):
        moco = moco.to(memory_format=torch.channels_last)
    queue = build.queue(cfg, info["train_size"]).to(device)
    strategy = build.strategy(cfg).to(device)
    if cfg.train.compile:
        compile_encoders(moco, dist.world_size())
    if cfg.model.sync_bn and dist.world_size() > 1:  # global BN statistics: no shuffle needed
        moco = torch.nn.SyncBatchNorm.convert_sync_batchnorm(moco)
        moco.shuffle_keys = False
    query = moco.encoder_q
    if dist.world_size() > 1:  # gradients averaged over ranks; BN of the query encoder stays local
        query = torch.nn.parallel.DistributedDataParallel(moco.encoder_q)
        query.register_comm_hook(None, dist.allreduce_per_parameter)  # exact resume at 3+ ranks
    opt = build.optimizer(moco.encoder_q, info["lr"], cfg)
    scaler = torch.amp.GradScaler(
        device.type, enabled=device.type == "cuda" and cfg.train.amp == "fp16"
    )
    state = State(
        loss_sum=torch.zeros((), device=device),
        bad_loss=torch.zeros((), dtype=torch.bool, device=device),
    )
    return Run(
        cfg=cfg,
        info=info,
        device=device,
        moco=moco,
        query=query,
        queue=queue,
        strategy=strategy,
        loss_fn=build.loss_fn(cfg, data.num_classes).to(device),
        optimizer=opt,
        scaler=scaler,
        data=data,
        log=MetricsLog(cfg.out_dir),
        state=state,
        probe=online_probe(cfg, moco, data.num_classes, device),
        graph=cuda_graphs.CapturedStep(train_step) if cfg.train.cuda_graphs else None,
        lock=lock,
    )


def lock_run_dir(cfg: Config) -> runlock.RunLock | None:
    """Rank 0 locks ``out_dir`` for the run's life (:mod:`pretrain.engine.runlock`) and removes the
    temporary checkpoint files a killed run left; every rank exits 2 if another run holds it.
    Per run, not per rank: torchrun's ranks share rank 0's lock, and a requeued SLURM job finds
    the lock of its killed predecessor released by the kernel."""
    lock, refused = None, ""
    if dist.is_main():
        lock = runlock.RunLock(cfg.out_dir)
        try:
            lock.acquire()
        except runlock.RunInUseError as e:
            lock, refused = None, str(e)
        else:
            checkpoint.remove_stale_tmp(Path(cfg.out_dir) / "checkpoints")
    if dist.any_rank(bool(refused)):
        raise ConfigError(refused or f"out_dir {cfg.out_dir} is in use by another run (rank 0 "
                          "names it)")  # fmt: skip
    return lock


def online_probe(
    cfg: Config, moco: torch.nn.Module, num_classes: int, device: torch.device
) -> OnlineProbe | None:
    """``eval.online_probe``: the probe on the query backbone (hooked after the key encoder was
    copied, so the key encoder carries no hook); same initial weights on every rank."""
    if not cfg.eval.online_probe:
        return None
    backbone = moco.encoder_q.backbone
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        probe = OnlineProbe(feature_dim=backbone.feature_dim, num_classes=num_classes,
                            lr=cfg.eval.online_probe_lr).to(device)  # fmt: skip
    probe.attach(backbone)
    return probe


def compile_encoders(moco: torch.nn.Module, world_size: int) -> None:
    """``train.compile``: torch.compile both encoders' forward in place (``Module.compile``), so
    the modules, their parameters (the momentum update) and state-dict keys are unchanged and
    checkpoints move freely between compiled and eager runs."""
    if world_size > 1:
        raise ConfigError(
            "train.compile=true is refused under DDP: compiled DDP splits the graph at gradient "
            "buckets and has not been shown to equal one process here; set train.compile=false"
        )
    moco.encoder_q.compile()
    moco.encoder_k.compile()


def announce(run: Run, resumed: bool) -> None:
    if not dist.is_main():
        return
    (run.run_dir / "config.yaml").write_text(config.dump(run.cfg))
    (run.run_dir / "derived.yaml").write_text(yaml.safe_dump(run.info, sort_keys=False))
    print("derived:", yaml.safe_dump(run.info, sort_keys=False, default_flow_style=True), end="")
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


def check_run_dir(cfg: Config) -> None:
    """Refuse an ``out_dir`` that cannot be written before anything starts (exit 2)."""
    path = Path(cfg.out_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write_test.{dist.rank()}.{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigError(
            f"out_dir {path} cannot be written ({e.strerror or e}); choose a writable out_dir"
        ) from None


def run_training(cfg: Config) -> int:
    """Train ``cfg`` to completion, resuming from ``out_dir/checkpoints/last.pt`` if present.

    Returns the exit status: 0 when finished or stopped cleanly by SIGTERM/SIGUSR2 (checkpoint
    written), 130 after Ctrl-C (checkpoint written).
    """
    run = setup(cfg)
    run.provenance = provenance.start(run.run_dir, run.device)
    try:
        return train(run)
    finally:
        provenance.finish(run.provenance, run.state.global_step)
        run.close()


def train(run: Run) -> int:
    """The run after :func:`setup`: resume or start, then epochs until done or stopped."""
    cfg = run.cfg
    last = run.run_dir / "checkpoints" / "last.pt"
    resumed = last.exists() or last.is_symlink()
    if resumed:  # RNG states must stay on the CPU
        restore(run, checkpoint.load(last, map_location="cpu"), last)
        check_epochs_left(run)
        run.log.truncate(run.state.global_step)
        if is_complete(run):  # the command of a finished run, again: say so, rewrite nothing
            if dist.is_main():
                print(closing.already_complete(run.run_dir, cfg.train.epochs), flush=True)
            return 0
    else:
        init_loss(run)
    announce(run, resumed)
    st, steps = run.state, run.info["steps_per_epoch"]
    if st.pending is not None and dist.any_rank(not run.log.has(st.pending)):
        finish_epoch(run, st.pending)  # the evaluation a failure cut short, before going on
    st.pending = None
    with checkpoint.StopSignals() as stop:
        while st.epoch < cfg.train.epochs:
            if reached_max_steps(run):  # at an epoch boundary (or a rerun with the same limit)
                return stop_at_max_steps(run)
            tic = time.perf_counter()
            finished = train_one_epoch(run, stop)
            if finished and dist.any_rank(stop.stop):  # a stop in the epoch's last step: save
                stop.received = stop.received or signal.SIGTERM  # before the kNN monitor; the
                finished = False  # resume (step_in_epoch == steps) goes to the epoch's end
            if not finished and stop.received is None:  # train.max_steps, mid-epoch
                return stop_at_max_steps(run)
            if not finished:
                save(run)
                if dist.is_main():
                    print(
                        f"\n{stop.name}: checkpoint saved at epoch {st.epoch + 1} step "
                        f"{st.step_in_epoch}/{steps}; run the same command to resume",
                        flush=True,
                    )
                run.log.close()
                stop.forward()  # e.g. submitit: checkpoint() + requeue; returns for a plain run
                return 130 if stop.name == "SIGINT" else 0
            check_finite(run)
            st.pending = epoch_record(run, time.perf_counter() - tic)
            st.epoch, st.step_in_epoch = st.epoch + 1, 0
            st.loss_sum.zero_()
            is_last = st.epoch == cfg.train.epochs
            if is_last or st.epoch % cfg.train.ckpt_every == 0:  # before the evaluation: a
                save(  # failed one loses no training (the rerun evaluates this epoch again)
                    run,
                    also_epoch=cfg.train.keep_every > 0 and st.epoch % cfg.train.keep_every == 0,
                )
            finish_epoch(run, st.pending)
            st.pending = None
    if dist.is_main():
        print(closing.finished(run.run_dir, cfg.train.epochs), flush=True)
    return 0


def is_complete(run: Run) -> bool:
    """A resumed run that has trained and evaluated every epoch (every rank agrees)."""
    st = run.state
    done = st.epoch >= run.cfg.train.epochs and st.step_in_epoch == 0
    return done and not dist.any_rank(st.pending is not None and not run.log.has(st.pending))


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


def epoch_record(run: Run, seconds: float) -> dict[str, Any]:
    """The finished epoch's line of ``metrics.jsonl`` before its evaluation: taken before the
    epoch's checkpoint, which holds it until :func:`finish_epoch` has logged it."""
    st = run.state
    record: dict[str, Any] = {
        "kind": "epoch",
        "epoch": st.epoch + 1,
        "global_step": st.global_step,
        "loss": st.loss_sum.item() / run.info["steps_per_epoch"],
        "epoch_time_s": seconds,
    }
    if run.data.skipped is not None:  # data.skip_bad_images: also when no step line printed it
        record["skipped_images"] = int(run.data.skipped.sum())
    if run.probe is not None:  # "online": not the offline linear probe of linear_eval
        record["online_train_top1"] = run.probe.take_train_top1()  # rank 0's shard
    return record


def finish_epoch(run: Run, record: dict[str, Any]) -> None:
    """Evaluate the epoch of ``record`` (after its checkpoint), then log and print it. The global
    RNG is restored afterwards, so a rerun that redoes the evaluation trains on bit-identically.
    If the evaluation fails, a checkpoint of the finished epoch is written first (when
    ``train.ckpt_every`` skipped it) and the error says so."""
    rng = checkpoint.rng_state()
    try:
        record = end_of_epoch(run, dict(record))
    except Exception as e:
        st, last = run.state, run.run_dir / "checkpoints" / "last.pt"
        if dist.is_main():
            saved = st.saved_step == st.global_step
            if not saved:  # train.ckpt_every skipped this epoch: write it now
                try:
                    write_checkpoint(run)
                    saved = True
                except checkpoint.CheckpointError as w:
                    e.add_note(f"The epoch's checkpoint could not be written either: {w}")
            if saved:
                e.add_note(
                    f"The checkpoint of epoch {record['epoch']} is saved ({last}): fix the cause "
                    "and run the same command; it evaluates that epoch and goes on."
                )
        raise
    checkpoint.set_rng_state(rng)
    if dist.is_main():
        print(
            " ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                for k, v in record.items()
                if k != "kind"
            ),
            flush=True,
        )


def end_of_epoch(run: Run, record: dict[str, Any]) -> dict[str, Any]:
    cfg = run.cfg
    epoch = record["epoch"]
    if run.probe is not None:
        if dist.is_main():
            feats, labels = knn.extract(run.moco.encoder_q.backbone, run.data.test_loader,
                                        run.device)  # fmt: skip
            record["online_test_top1"] = run.probe.top1(feats, labels)
        else:
            record["online_test_top1"] = math.nan
        dist.barrier()
    every = cfg.eval.knn_every
    if epoch == cfg.train.epochs or (every > 0 and epoch % every == 0):
        if dist.is_main():
            record.update(evaluate(run))
        else:
            record.update({"oc_auroc" if run.data.in_classes else "knn_top1": math.nan})
        dist.barrier()
    run.log.write(record, "epoch")
    return record


def main(cfg: Config) -> int:
    try:
        return run_training(cfg)
    except (checkpoint.CheckpointError, NonFiniteLossError) as e:
        print(f"error: {e}{notes(e)}", file=sys.stderr)
        return 1
    except imagefiles.BadImageError as e:  # also when re-raised from a loader worker
        line = imagefiles.bad_image_line(e)
        print(f"error: {line}\nSet data.skip_bad_images=true to skip unreadable images "
              f"(each skip is counted in the log).{notes(e)}", file=sys.stderr)  # fmt: skip
        return 1


def notes(e: BaseException) -> str:
    """What the run added to an error on its way out (e.g. which checkpoint is saved)."""
    return "".join(f"\n{note}" for note in getattr(e, "__notes__", ()))
