"""The one schema with every default; YAML files and the command line hold overrides only.

    cfg = load("digits_moco.yaml", ["train.epochs=5", "out_dir=/tmp/run"])

A bare file name resolves to ``pretrain/configs/``; a path is read as it is. Unknown keys and values
of the wrong type raise :class:`ConfigError`, naming the key, the file and the closest valid key;
the CLI turns that into exit status 2. Derived values (effective learning rate, steps per epoch)
come from :func:`derived`, which never mutates the config.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pretrain import config_files, config_plugins, config_rules
from pretrain.config_types import coerce, typed_kwargs
from pretrain.errors import ConfigError

CONFIG_DIR = Path(__file__).parent / "configs"


@dataclass
class DataConfig:
    name: str = "digits"  # digits | cifar10 | cifar100 | stl10 | imagefolder | imagenet100
    root: str = "data"  # dataset folder; never downloaded at run time
    image_size: int = 224  # crop size of the training views (and of the eval centre crop)
    eval_resize: int = 256  # eval: resize the short side to this, then centre-crop image_size
    crop_scale: tuple[float, float] = (0.2, 1.0)  # RandomResizedCrop scale (MoCo v2)
    affine_degrees: float = 0.0  # RandomAffine rotation; 0 = off (useful for digits)
    affine_translate: float = 0.0  # RandomAffine translation fraction; 0 = off
    jitter_strength: float = 0.4  # ColorJitter(b=c=s=strength, hue=strength/4); 0 = off
    jitter_prob: float = 0.8  # MoCo v2
    grayscale_prob: float = 0.2  # MoCo v2
    blur_prob: float = 0.5  # MoCo v2 GaussianBlur sigma in [0.1, 2]; CIFAR recipes turn it off
    hflip_prob: float = 0.5  # MoCo v2; digits must not be mirrored
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)  # ImageNet statistics
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    num_workers: int = -1  # DataLoader processes per rank; -1 = this rank's share of the cores
    # minus one (the training process's; pretrain/runtime/cores.py); explicit counts are capped at
    # that
    augment_on: str = "device"  # device: crops in workers, photometric ops batched on the
    # training device (pretrain/data/augment.py); workers: all per sample in workers (the reference)
    decode_on: str = "auto"  # where training JPEGs are decoded and cropped: cpu (loader
    # workers), device (whole batch in the training process, nvjpeg on CUDA; docs/gpu_decode.md),
    # auto = device on CUDA for imagefolder/imagenet100 with augment_on device and no affine
    resident: str = "auto"  # device: the training split decoded once (image files cached in
    # RUN/cache or $NEGMINE_CACHE_DIR), held as uint8 on the training device, batches and both
    # views' augmentation made there (no DataLoader); off: loader workers; auto = device on CUDA
    # when it fits in half the free device memory (docs/input-pipeline.md#resident-training-set)
    augment_compile: bool = False  # torch.compile stage 2 (augment_on: device): ~3x less CPU per
    # image at 32 px on a CPU; ~30 s of compile at the first step; needs a C++ compiler on a CPU
    train_split: str = "train"  # stl10 pretraining uses "train+unlabeled"; imagefolder: a
    # folder under root or an image-list file (*.txt, lines "relative/path label")
    test_split: str = "test"  # imagefolder: held-out folder (test/, else val/) or image list
    subset: float = 0.0  # 0 = all; >= 1: that many training images per class; in (0, 1): that
    # fraction of each class; drawn with the seed (smoke tests on real data)
    skip_bad_images: bool = False  # replace unreadable images by the next one and count them
    resume_on_changed_data: bool = False  # resume although the training set differs from the
    # checkpoint's (its size or digest; pretrain/data/identity.py): refused (exit 2) otherwise
    in_classes: list[int] = field(default_factory=list)  # one-class / subset training: the
    # in-distribution classes kept in the training set and the kNN bank; [] = all classes
    support_views: int = 0  # extra augmented views per image through the key encoder: FNC's
    # support set for finding false negatives (loss.name fnc; official 8); needs augment_on device


@dataclass
class ModelConfig:
    arch: str = "resnet50"  # resnet_small | resnet18 | resnet34 | resnet50
    width: int = 32  # resnet_small only: channels of the first stage
    cifar_stem: bool = False  # 3x3 stride-1 conv1 and no max-pool (CIFAR recipes)
    dim: int = 128  # output dimension of the projection head (MoCo)
    mlp: bool = True  # MoCo v2 head Linear-ReLU-Linear; False = single Linear (MoCo v1)
    bn_splits: int = 1  # >1: split BatchNorm + key shuffle on one device (MoCo CIFAR recipe)
    split_bn: str = "auto"  # bn_splits > 1, its training kernels: auto (triton on CUDA, per_split
    # on a CPU), triton (4 launches per layer), fused (aten ops), per_split (a batch_norm per split)
    sync_bn: bool = False  # DDP: SyncBatchNorm in both encoders instead of shuffle-BN
    kappa_hidden: int = 0  # >0: a kappa (concentration) head with this hidden width (vMF-κ: 512)


@dataclass
class MocoConfig:
    queue_size: int = 65536  # K; must not exceed the training set
    momentum: float = 0.999  # m in key <- m * key + (1 - m) * query
    temperature: float = 0.2  # MoCo v2 (v1 and the reference code default: 0.07)


@dataclass
class TrainConfig:
    epochs: int = 200
    batch_size: int = 256  # global batch (split across ranks)
    base_lr: float = 0.03  # lr for a global batch of lr_base_batch; scaled linearly
    lr_base_batch: int = 256
    lr_schedule: str = "cosine"  # cosine | step
    lr_milestones: list[int] = field(default_factory=lambda: [120, 160])  # step schedule only
    lr_per_epoch: bool = True  # MoCo sets the lr once per epoch; False = per step
    lr_first_epoch: int = 0  # epoch number the schedule reads in the first epoch: 0 as
    # main_moco.py; 1 as the MoCo CIFAR-10 colab (0.06 * 0.5 * (1 + cos(pi * 1/200)) in epoch 1)
    warmup_epochs: float = 0.0  # linear warm-up from 0, in epochs
    weight_decay: float = 1e-4
    sgd_momentum: float = 0.9
    wd_exclude_bias_and_norm: bool = False  # MoCo decays every parameter
    amp: str = "auto"  # encoders' autocast: auto (bf16 on CUDA and on bf16-capable CPUs) | bf16
    # (CPU or CUDA) | fp16 (CUDA) | off; negatives and loss stay float32
    # (pretrain/runtime/precision.py)
    channels_last: bool = True  # NHWC encoders and batches on CUDA, and on a CPU under bf16
    # autocast (faster there); fp32 CPU runs stay contiguous (pretrain/runtime/precision.py)
    threads: int = 0  # torch intra-op threads per rank; 0 = auto (pretrain/runtime/threads.py: 1 on
    # a share of <= 4 cores, else the share); the env NEGMINE_THREADS overrides
    compile: bool = False  # torch.compile the encoders' forward (modules and state dicts unchanged)
    cuda_graphs: bool = False  # EXPERIMENTAL, CUDA: capture the whole step as one CUDA graph and
    # replay it (pretrain/engine/cuda_graphs.py; refused where it cannot work). Unverified on a GPU:
    # its one GPU run (H200, 2026-11-26) crashed with a CUDA kernel error; eager default
    deterministic: bool = False  # deterministic kernels; exact replay after resume on CPU
    log_every: int = 50  # steps between metrics.jsonl/TensorBoard step lines (one host sync each)
    ckpt_every: int = 1  # epochs between writes of checkpoints/last.pt
    keep_every: int = 0  # also keep checkpoints/epoch_N.pt every N epochs; 0 = never
    progress_bar: bool = True  # tqdm bar (hidden automatically when stderr is not a terminal)
    max_steps: int = 0  # > 0: stop after this many global steps with a checkpoint, as a stop
    # signal does (raise it, or set 0, and run the same command to continue)
    max_requeues: int = 100  # SLURM: requeues after preemption or time limit before giving up
    dist_timeout_min: float = 60.0  # DDP: collective timeout (NCCL's default is 10): ranks wait
    # this long in a barrier while rank 0 runs the kNN monitor; raise it for a large eval set


@dataclass
class EvalConfig:
    knn_every: int = 10  # epochs between kNN monitor runs; 0 = never (the last epoch always runs)
    online_probe: bool = False  # a stop-gradient linear probe trained during pretraining on the
    # backbone features (labels needed); logs online_train_top1 / online_test_top1 every epoch
    online_probe_lr: float = 0.1  # its SGD lr (momentum 0.9, no weight decay, constant)
    knn_k: int = 200  # InstDisc / MoCo CIFAR demo
    knn_features: str = "backbone"  # backbone (pooled, as linear_eval) | head (the projection
    # head's output, as the MoCo CIFAR colab's monitor) | head+backbone (both; first = knn_top1)
    knn_temperature: float = 0.1
    batch_size: int = 256  # feature extraction batch


@dataclass
class LossConfig:
    """The loss (``pretrain.losses``); MoCo's ``moco.temperature`` is its T."""

    name: str = "infonce"  # a registered loss (pretrain.losses.list_losses()); the
    # configuration reference lists each one's settings
    symmetric: bool = False  # both views through the query encoder, anchors [q1; q2] against
    # each other: the papers' 2N x 2N layout (nt_xent, supcon, sincere, firm, cider, kappa terms)
    contrast_queue: bool = True  # False: the batch alone is the contrast set (no queue); with
    # symmetric it is the papers' equation exactly, without it FIRM's authors' N x N training loss
    kwargs: dict[str, Any] = field(default_factory=dict)  # the loss's own settings (its
    # constructor's keyword arguments, checked against its signature and typed by its
    # annotations), plus kappa_lambda_align / kappa_lambda_reg with a kappa head


@dataclass
class NegativesConfig:
    name: str = "none"  # a key of negatives.list_strategies()
    kwargs: dict[str, Any] = field(default_factory=dict)  # the strategy's own settings, passed
    # to negatives.create(name, ...) and checked against its signature


@dataclass
class Config:
    out_dir: str = ""  # run directory; empty = runs/<config file stem>
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    moco: MocoConfig = field(default_factory=MocoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    negatives: NegativesConfig = field(default_factory=NegativesConfig)
    plugins: list[str] = field(default_factory=list)  # strategies and losses of one's own to load
    # first: a Python file (path/to/mine.py) or module[:Class]; an installed package's are found
    # through its entry points (negmine.strategies, negmine.losses) without this key


CHOICES = {
    "data.name": ("digits", "cifar10", "cifar100", "stl10", "imagefolder", "imagenet100"),
    "model.arch": ("resnet_small", "resnet18", "resnet34", "resnet50"),
    "model.split_bn": ("auto", "triton", "fused", "per_split"),
    "train.lr_schedule": ("cosine", "step"),
    "train.amp": ("auto", "bf16", "fp16", "off"),
    "data.augment_on": ("device", "workers"),
    "data.decode_on": ("auto", "cpu", "device"),
    "data.resident": ("auto", "off", "device"),
    "eval.knn_features": ("backbone", "head", "head+backbone", "backbone+head"),
}


def registered_choices() -> dict[str, list[str]]:
    """The names the registries hold (``loss.name``, ``negatives.name``): one list, never copied
    here, so a new loss or strategy file is a valid config value with no edit to this module."""
    import negatives  # the registries import torch; config stays importable on its own
    from pretrain import losses

    return {
        "loss.name": losses.list_losses(),
        "negatives.name": negatives.list_strategies(),
    }


def load(name: str, overrides: list[str] | None = None) -> Config:
    """Defaults, then the YAML file's overrides, then ``dotted.key=value`` overrides."""
    path = config_files.resolve_path(name, CONFIG_DIR)
    raw = config_files.parse_yaml(config_files.read_text(path), str(path)) or {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: the top level must be a mapping of keys, got {type(raw).__name__}"
        )
    cfg = merge(Config(), raw, source=str(path))
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {ascii(item)} is not of the form dotted.key=value")
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:  # bytes the locale could not decode (surrogate escapes)
            raise ConfigError(
                f"config key {ascii(key.strip())} on the command line: the value {ascii(value)} "
                "is not UTF-8 text; give paths and values in UTF-8"
            ) from None
        nested: dict[str, Any] = {}
        node = nested
        dotted = key.strip()
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        text = value.strip()
        node[leaf] = config_files.parse_yaml(value, "command line", f"{dotted}.") if text else ""
        cfg = merge(cfg, nested, source="command line")
    if not cfg.out_dir:
        cfg = dataclasses.replace(cfg, out_dir=str(Path("runs") / path.stem))
    cfg = config_plugins.load_plugins(cfg, "the config", base=path.parent)[0]
    cfg = typed_kwargs(cfg)
    validate(cfg)
    return cfg


def merge(base: Any, raw: dict[str, Any], source: str, prefix: str = "") -> Any:
    """Return a copy of dataclass ``base`` with ``raw`` applied; strict on keys and types."""
    hints = typing.get_type_hints(type(base))
    names = [f.name for f in dataclasses.fields(base)]
    changes: dict[str, Any] = {}
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        if dotted in config_files.MOVED:
            raise ConfigError(config_files.moved_message(dotted, value, source))
        if key not in names:
            valid = [f"{prefix}{n}" for n in names]
            close = difflib.get_close_matches(dotted, valid, n=1, cutoff=0.5)
            raise ConfigError(
                f"unknown config key {dotted!r} in {source}"
                + (f"; closest valid key: {close[0]!r}" if close else "")
                + f" (valid keys here: {', '.join(valid)})"
            )
        current = getattr(base, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(
                    f"{dotted!r} in {source} must be a mapping of keys, got {value!r}"
                )
            changes[key] = merge(current, value, source, prefix=f"{dotted}.")
        elif isinstance(current, dict) and isinstance(value, dict):
            # dict fields (negatives.kwargs) merge key by key: an override of one keyword keeps
            # the file's others
            changes[key] = {**current, **coerce(value, hints[key], dotted, source, CHOICES)}
        else:
            changes[key] = coerce(value, hints[key], dotted, source, CHOICES)
    return dataclasses.replace(base, **changes)


def unknown_name(key: str, cfg: Config) -> str:
    """Why ``negatives.name`` / ``loss.name`` names nothing registered here, or '': a name no
    registered one is close to is a plugin not installed here (said first); a close one, a typo
    (with the suggestion)."""
    allowed = registered_choices()[key]
    section, name = key.split(".")
    value = getattr(getattr(cfg, section), name)
    if value in allowed:
        return ""
    close = difflib.get_close_matches(str(value), allowed, n=1)
    if not close:
        kind = "loss" if section == "loss" else "negative strategy"
        return (f"config key {key!r} is {value!r}: not installed here: no {kind} of that name is "
                "built in or installed (install the plugin's package, or name its file in "
                f"plugins: [...]); installed: {', '.join(allowed)}")  # fmt: skip
    return (f"config key {key!r} is {value!r}; expected one of {', '.join(allowed)} "
            f"(did you mean {close[0]!r}?)")  # fmt: skip


def validate(cfg: Config) -> None:
    """Value checks that the types alone cannot express: the choices, the registries' keyword
    arguments, then the rules of :mod:`pretrain.config_rules`."""
    import negatives
    from pretrain import losses

    for key, registry in (("negatives.name", negatives.strategies), ("loss.name", losses.registry)):
        section, name = key.split(".")
        why = registry.problem(getattr(getattr(cfg, section), name))
        if why:
            raise ConfigError(f"config key {key!r}: {why}")
    unknown = [why for why in map(unknown_name, ("negatives.name", "loss.name"), [cfg] * 2) if why]
    if unknown:  # every unknown name, the ones no built-in is close to first: not installed
        raise ConfigError("; ".join(sorted(unknown, key=lambda w: "did you mean" in w)))
    for key, allowed in {**CHOICES, **registered_choices()}.items():
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value not in allowed:
            close = difflib.get_close_matches(str(value), allowed, n=1)
            raise ConfigError(
                f"config key {key!r} is {value!r}; expected one of {', '.join(allowed)}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
            )
    from negatives.registry import strategies
    from pretrain.losses import registry as losses_registry

    config_rules.check_loss_kwargs(cfg, losses_registry.get(cfg.loss.name))
    try:
        strategies.check_kwargs(cfg.negatives.name, dict(cfg.negatives.kwargs))
    except ValueError as e:
        raise ConfigError(f"config key 'negatives.kwargs': {e}") from None
    facts = config_rules.facts(cfg.loss.name, cfg.negatives.name)
    for rule in config_rules.RULES:  # in order: the first that fails is the error
        error = rule.error(cfg, facts)
        if error:
            raise ConfigError(error)


@dataclass(frozen=True, kw_only=True)
class Derived:
    """Values computed from the config and the data (MAE prints its ``lr`` from ``blr`` the same
    way); printed and saved with the run as ``derived.yaml``, never written back to the config."""

    lr: float  # train.base_lr * train.batch_size / train.lr_base_batch
    global_batch: int  # train.batch_size
    per_rank_batch: int  # train.batch_size // world_size
    world_size: int
    train_size: int  # training images after data.subset / data.in_classes
    steps_per_epoch: int  # train_size // train.batch_size (drop_last, as MoCo)
    total_steps: int  # steps_per_epoch * train.epochs
    queue_fraction_of_train: float  # moco.queue_size / train_size, rounded to 4 places
    initial_loss_ln_1_plus_K: float  # ln(K + 1): InfoNCE's loss at chance, rounded to 4 places

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def derived(cfg: Config, train_size: int, world_size: int = 1) -> Derived:
    """Values computed from the config and the data; printed and saved with the run."""
    steps = train_size // cfg.train.batch_size  # drop_last, as MoCo
    return Derived(
        lr=cfg.train.base_lr * cfg.train.batch_size / cfg.train.lr_base_batch,
        global_batch=cfg.train.batch_size,
        per_rank_batch=cfg.train.batch_size // world_size,
        world_size=world_size,
        train_size=train_size,
        steps_per_epoch=steps,
        total_steps=steps * cfg.train.epochs,
        queue_fraction_of_train=round(cfg.moco.queue_size / max(train_size, 1), 4),
        initial_loss_ln_1_plus_K=round(math.log(cfg.moco.queue_size + 1), 4),
    )


def to_dict(cfg: Config) -> dict[str, Any]:
    """Plain nested dict (tuples as lists) for YAML and checkpoints."""

    def plain(v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return plain(dataclasses.asdict(cfg))


def from_dict(
    raw: dict[str, Any], source: str = "checkpoint", *, encoder_only: bool = False
) -> Config:
    """Inverse of :func:`to_dict`, with the same strict checks; an older config's moved keys
    are migrated (:func:`pretrain.config_files.migrate`). ``encoder_only`` (evaluation, export):
    a loss or strategy that is a plugin not installed here is not needed, so a warning names it
    and the config is returned unchecked."""
    cfg = merge(Config(), config_files.migrate(raw, source), source=source)
    cfg, missing = config_plugins.load_plugins(cfg, source, missing_ok=encoder_only)
    if encoder_only:
        missing += config_plugins.missing_plugins(cfg)
        if missing:
            print(
                f"warning: {source}: trained with {'; '.join(missing)}; the encoder does not "
                "need it: evaluation and export go on without it",
                file=sys.stderr,
            )
            return cfg
    cfg = typed_kwargs(cfg)
    validate(cfg)
    return cfg


def dump(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)
