"""Everything before the first step: device and checks, the run folder's lock, then the objects of
:class:`~pretrain.engine.run.Run` from the config (through :mod:`pretrain.build`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from negmine_core.contract.watch import StepWatch
from pretrain import build, config
from pretrain.config import Config, ConfigError
from pretrain.data import resident
from pretrain.data.pipeline import Data
from pretrain.engine import cuda_graphs, memory, monitor, world
from pretrain.engine.online_probe import OnlineProbe
from pretrain.engine.run import Run, State
from pretrain.engine.step import train_step
from pretrain.runtime import checkpoint_io, dist, precision, run_folder, runlock, threads
from pretrain.runtime.metrics_log import MetricsLog
from pretrain.runtime.triton_env import triton_interpreted


def setup(cfg: Config) -> Run:
    """Check what needs the device and the rank count, lock ``out_dir``, build the run."""
    device = dist.init_from_env(timeout_min=cfg.train.dist_timeout_min)
    world.check(cfg, dist.world_size())  # every rank: exit 2, not a traceback at the first step
    memory.check(cfg, device)  # a config that cannot fit: exit 2 before any work, every rank
    captured = cuda_graphs.chosen(cfg, device.type, dist.world_size())  # "on" refused: exit 2
    on_cuda = device.type == "cuda" or triton_interpreted()
    if cfg.model.split_bn in ("triton", "triton_onepass") and not on_cuda:
        raise ConfigError(
            f"config key 'model.split_bn' = {cfg.model.split_bn!r} needs a CUDA device (this run "
            f"is on {device.type}); set model.split_bn=auto"
        )
    build.check_pairing(cfg)  # the loss's declared strategies, before any data is read
    check_run_dir(cfg)  # every rank, before any data is read
    lock = lock_run_dir(cfg)
    try:
        return build_run(cfg, device, lock, captured)
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def build_run(
    cfg: Config, device: torch.device, lock: runlock.RunLock | None, captured: bool = False
) -> Run:
    """The data, then the model, queue, strategy, loss and optimizer on ``device``; the step
    captured as a CUDA graph when ``captured`` (:func:`cuda_graphs.chosen`)."""
    precision.amp_dtype(cfg.train.amp, device)  # fp16 on a CPU: a config error before any work
    threads.configure(cfg.train.threads, device)  # this rank's share of the cores
    seed_and_kernels(cfg)
    data = read_data(cfg, device)
    derived = config.derived(cfg, len(data.train), dist.world_size())
    if derived.steps_per_epoch < 1:
        raise ConfigError(f"train.batch_size {cfg.train.batch_size} exceeds the training set")
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank
    moco = build.model(cfg, device).to(device)
    if moco.channels_last:
        moco = moco.to(memory_format=torch.channels_last)
    queue = build.queue(cfg, derived.train_size).to(device)
    strategy, loss_fn = build.strategy(cfg), build.loss_fn(cfg, data.num_classes)
    set_up(cfg, moco, data, device, strategy, loss_fn)  # one moment, before a checkpoint loads
    strategy, loss_fn = strategy.to(device), loss_fn.to(device)
    if cfg.train.compile:
        compile_encoders(moco, dist.world_size())
    if cfg.model.sync_bn and dist.world_size() > 1:  # global BN statistics: no shuffle needed
        moco = torch.nn.SyncBatchNorm.convert_sync_batchnorm(moco)
        moco.shuffle_keys = False
    if dist.world_size() > 1:
        moco.wrap_for_ddp()
    return Run(
        cfg=cfg,
        derived=derived,
        device=device,
        moco=moco,
        queue=queue,
        strategy=strategy,
        loss_fn=loss_fn,
        optimizer=build.optimizer(moco.encoder_q, derived.lr, cfg),
        scaler=torch.amp.GradScaler(
            device.type, enabled=device.type == "cuda" and cfg.train.amp == "fp16"
        ),
        data=data,
        log=MetricsLog(cfg.out_dir),
        state=State(
            loss_sum=torch.zeros((), device=device),
            bad_loss=torch.zeros((), dtype=torch.bool, device=device),
        ),
        probe=online_probe(cfg, moco, data.num_classes, device),
        graph=cuda_graphs.CapturedStep(train_step) if captured else None,
        lock=lock,
        watch=StepWatch(type(strategy), type(loss_fn), symmetric=cfg.loss.symmetric),
    )


def seed_and_kernels(cfg: Config) -> None:
    """``train.deterministic`` and this rank's seed for the data (weights are seeded later)."""
    if cfg.train.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    else:
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(cfg.seed + dist.rank())


def read_data(cfg: Config, device: torch.device) -> Data:
    """The run's datasets and loaders; an unreadable ``data.root`` is a config error (exit 2)."""
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
    return data


def lock_run_dir(cfg: Config) -> runlock.RunLock | None:
    """Rank 0 locks ``out_dir`` for the run's life (:mod:`pretrain.runtime.runlock`) and removes the
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
            checkpoint_io.remove_stale_tmp(Path(cfg.out_dir) / "checkpoints")
    if dist.any_rank(bool(refused)):
        raise ConfigError(
            refused or f"out_dir {cfg.out_dir} is in use by another run (rank 0 names it)"
        )
    return lock


#: what a run writes in its folder: files that must not be links, folders that must not lead out
RUN_FILES = (".lock", "config.yaml", "derived.yaml", "metrics.jsonl", "provenance.json")
RUN_DIRS = ("checkpoints", "tensorboard")


def check_run_dir(cfg: Config) -> None:
    """Refuse an ``out_dir`` that cannot be written, or whose files or folders that a run writes
    are symbolic links out of it (:mod:`pretrain.runtime.run_folder`), before anything starts
    (exit 2)."""
    path = Path(cfg.out_dir)
    cache = () if os.environ.get(resident.CACHE_ENV) else ("cache",)  # else the user's own folder
    run_folder.check_run_folder(path, RUN_FILES, RUN_DIRS + cache)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write_test.", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(
            f"out_dir {path} cannot be written ({e.strerror or e}); choose a writable out_dir"
        ) from None


def online_probe(
    cfg: Config, moco: torch.nn.Module, num_classes: int, device: torch.device
) -> OnlineProbe | None:
    """``eval.online_probe``: the probe on the query backbone's features (which the model keeps,
    ``MoCo.keep_features``); same initial weights on every rank."""
    if not cfg.eval.online_probe:
        return None
    dim = moco.encoder_q.backbone.feature_dim
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        probe = OnlineProbe(feature_dim=dim, num_classes=num_classes, lr=cfg.eval.online_probe_lr)
    return probe.to(device)


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
    moco.cast_keys = False  # the compiled key encoder is called as compiled (inductor fuses casts)


def set_up(
    cfg: Config,
    moco: torch.nn.Module,
    data: Data,
    device: torch.device,
    strategy: torch.nn.Module,
    loss_fn: torch.nn.Module,
) -> None:
    """The strategy's and the loss's setup hooks, called the same way once per run, before a
    checkpoint is loaded (:func:`pretrain.engine.build.set_up`): the context holds the model and,
    when a hook asks for them, the training images' normalised head outputs in eval mode
    (CIDER's class prototypes; every rank computes the same)."""

    def features() -> tuple[torch.Tensor, torch.Tensor]:
        z, y = monitor.extract(moco.encoder_q, data.bank_loader, device)
        return z.to(device), y.to(device)

    ctx = build.setup_context(
        cfg,
        num_classes=data.num_classes,
        device=device,
        model=moco,
        features=features,
        resuming=resuming(cfg),
    )
    build.set_up(cfg, strategy, loss_fn, ctx)


def resuming(cfg: Config) -> bool:
    """Whether the run will resume from its ``last.pt`` (as :func:`pretrain.engine.loop.start`
    decides: the file, or a link to it, exists)."""
    last = Path(cfg.out_dir) / "checkpoints" / "last.pt"
    return last.exists() or last.is_symlink()
