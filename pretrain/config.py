"""The one schema with every default; YAML files and the command line hold overrides only.

    cfg = load("digits_moco.yaml", ["train.epochs=5", "out_dir=/tmp/run"])

A bare file name resolves to ``pretrain/configs/``; a path is read as it is. Unknown keys and values
of the wrong type raise :class:`ConfigError`, naming the key, the file and the closest valid key;
the CLI turns that into exit status 2. Derived values (effective learning rate, steps per epoch)
come from :func:`derived`, which never mutates the config.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import math
import types
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

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
    kappa_hidden: int = 0  # >0: a kappa (concentration) head of this hidden width (Li et al.: 512)


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


# Keys that moved into loss.kwargs (issue 39): old spelling -> (new key, the old default, which an
# old checkpoint's config carries for every loss and which is dropped there without a word).
MOVED = {
    "loss.supcon_reference_scale": ("loss.kwargs.reference_scale", False),
    "loss.cider_lambda_c": ("loss.kwargs.lambda_c", 2.0),
    "loss.cider_alpha": ("loss.kwargs.alpha", 0.95),
    "loss.cider_comp_scale": ("loss.kwargs.comp_scale", False),
    "loss.cider_dis_scale": ("loss.kwargs.dis_scale", False),
    "loss.kappa_lambda_align": ("loss.kwargs.kappa_lambda_align", 0.05),
    "loss.kappa_lambda_reg": ("loss.kwargs.kappa_lambda_reg", 0.005),
}


def moved_message(key: str, value: Any, source: str) -> str:
    new = MOVED[key][0]
    return (
        f"config key {key!r} in {source} has moved: write {new}={value!r} (in YAML: loss: "
        f"{{kwargs: {{{new.rsplit('.', 1)[1]}: {value!r}}}}}); a loss's own settings are "
        "under loss.kwargs, checked against its constructor"
    )


def migrate(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """An old checkpoint's config with the moved keys (:data:`MOVED`) spelled the new way: a key
    at its old default is dropped, any other moves into ``loss.kwargs`` with a warning."""
    loss = raw.get("loss")
    if not isinstance(loss, dict) or not any(f"loss.{k}" in MOVED for k in loss):
        return raw
    loss, notes = dict(loss), []
    kwargs = dict(loss.get("kwargs") or {})
    for key in [k for k in loss if f"loss.{k}" in MOVED]:
        value = loss.pop(key)
        new, default = MOVED[f"loss.{key}"]
        if value != default:
            kwargs[new.rsplit(".", 1)[1]] = value
            notes.append(f"loss.{key} -> {new}")
    loss["kwargs"] = kwargs
    if notes:
        warnings.warn(f"{source}: an older config, migrated: {', '.join(notes)}", stacklevel=3)
    return {**raw, "loss": loss}


def registered_choices() -> dict[str, list[str]]:
    """The names the registries hold (``loss.name``, ``negatives.name``): one list, never copied
    here, so a new loss or strategy file is a valid config value with no edit to this module."""
    import negatives  # the registries import torch; config stays importable on its own
    from pretrain import losses

    return {
        "loss.name": losses.list_losses(),
        "negatives.name": negatives.list_strategies(),
    }


def resolve_path(name: str) -> Path:
    """A bare name is looked up among the shipped configs; anything else is a path."""
    path = Path(name)
    if path.is_dir():
        raise ConfigError(
            f"config file {name!r} is a directory; give a YAML file (a path, or the name of a "
            "shipped config)"
        )
    if path.exists():
        return path
    shipped = CONFIG_DIR / path.name
    if path.parent == Path(".") and shipped.exists():
        return shipped
    known = sorted(p.name for p in CONFIG_DIR.glob("*.yaml"))
    hint = difflib.get_close_matches(path.name, known, n=1)
    raise ConfigError(
        f"config file {name!r} not found (neither a path nor a shipped config)"
        + (f"; did you mean {hint[0]!r}?" if hint else "")
        + f" Shipped configs: {', '.join(known)}"
    )


def load(name: str, overrides: list[str] | None = None) -> Config:
    """Defaults, then the YAML file's overrides, then ``dotted.key=value`` overrides."""
    path = resolve_path(name)
    raw = parse_yaml(read_text(path), str(path)) or {}
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
        *parents, leaf = key.strip().split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = parse_yaml(value, "command line", f"{key.strip()}.") if value.strip() else ""
        cfg = merge(cfg, nested, source="command line")
    if not cfg.out_dir:
        cfg = dataclasses.replace(cfg, out_dir=str(Path("runs") / path.stem))
    cfg = typed_kwargs(cfg)
    validate(cfg)
    return cfg


def read_text(path: Path) -> str:
    """A config file's text; unreadable or not UTF-8: a :class:`ConfigError`."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read ({e.strerror or e})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} on line {line}); save the file "
            "as UTF-8"
        ) from None


def parse_yaml(text: str, source: str, prefix: str = "") -> Any:
    """``yaml.safe_load`` that refuses a key given twice in one mapping (PyYAML silently keeps
    the last), naming the dotted key and both lines."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None:
            _refuse_duplicates(node, source, prefix)
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from None


def _refuse_duplicates(node: yaml.Node, source: str, prefix: str) -> None:
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _refuse_duplicates(item, source, prefix)
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict[str, int] = {}
    for key_node, value_node in node.value:
        key = str(key_node.value)
        line = key_node.start_mark.line + 1
        if key in seen and key != "<<":
            raise ConfigError(
                f"config key {prefix + key!r} is given more than once in {source} (lines "
                f"{seen[key]} and {line}); YAML would silently keep the last: keep one"
            )
        seen[key] = line
        _refuse_duplicates(value_node, source, f"{prefix}{key}.")


def merge(base: Any, raw: dict[str, Any], source: str, prefix: str = "") -> Any:
    """Return a copy of dataclass ``base`` with ``raw`` applied; strict on keys and types."""
    hints = typing.get_type_hints(type(base))
    names = [f.name for f in dataclasses.fields(base)]
    changes: dict[str, Any] = {}
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        if dotted in MOVED:
            raise ConfigError(moved_message(dotted, value, source))
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
            changes[key] = {**current, **coerce(value, hints[key], dotted, source)}
        else:
            changes[key] = coerce(value, hints[key], dotted, source)
    return dataclasses.replace(base, **changes)


def coerce(value: Any, hint: Any, key: str, source: str) -> Any:
    """Check ``value`` against a field's type; ints widen to floats, lists become tuples."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)

    def fail() -> ConfigError:
        return ConfigError(
            f"config key {key!r} in {source} expects {_type_name(hint)}, "
            f"got {value!r} ({type(value).__name__})"
        )

    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return coerce(value, inner[0], key, source)
    if hint is bool:
        if not isinstance(value, bool):
            raise fail()
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail()
        return value
    if hint is float:
        # YAML 1.1 reads "1e-4" (no dot) as a string; accept numeric strings for float keys.
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise fail() from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail()
        if not math.isfinite(value):  # YAML reads .inf/.nan (and inf/nan from strings above)
            raise ConfigError(
                f"config key {key!r} in {source} must be a finite number, got {value!r}"
            )
        return float(value)
    if hint is str:
        if isinstance(value, bool):
            # YAML 1.1 reads unquoted off/on/no/yes as booleans: `train.amp=off` or `amp: off`
            # means the choice "off" where the key has one.
            word = "on" if value else "off"
            if word in CHOICES.get(key, ()):
                return word
            raise ConfigError(
                f"{fail()}; YAML reads unquoted off/on/no/yes/true/false as booleans: quote the "
                f"value (on the command line: {key}='\"...\"')"
            )
        if not isinstance(value, str):
            raise fail()
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise fail()
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise fail()
            return tuple(coerce(v, a, key, source) for v, a in zip(value, args))
        return [coerce(v, args[0], key, source) for v in value]
    if origin is dict:
        if not isinstance(value, dict):
            raise fail()
        return dict(value)
    if hint is Any:
        return value
    raise TypeError(f"unsupported field type {hint} for {key}")


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def validate(cfg: Config) -> None:
    """Value checks that the types alone cannot express."""
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

    loss_cls = losses_registry.get(cfg.loss.name)
    strategy_cls = strategies.get(cfg.negatives.name)
    batch_losses = [n for n in losses_registry.names() if losses_registry.get(n).batch_layout]
    queue_optional = [n for n in losses_registry.names() if losses_registry.get(n).can_drop_queue]
    check_loss_kwargs(cfg, loss_cls)
    try:
        strategies.check_kwargs(cfg.negatives.name, dict(cfg.negatives.kwargs))
    except ValueError as e:
        raise ConfigError(f"config key 'negatives.kwargs': {e}") from None
    checks = [
        ("moco.queue_size", cfg.moco.queue_size > 0, "must be positive"),
        ("moco.momentum", 0.0 <= cfg.moco.momentum <= 1.0, "must lie in [0, 1]"),
        ("moco.temperature", cfg.moco.temperature > 1e-3, "must be above 1e-3"),
        ("train.epochs", cfg.train.epochs > 0, "must be positive"),
        ("train.batch_size", cfg.train.batch_size > 1, "must be at least 2"),
        ("train.base_lr", cfg.train.base_lr > 0, "must be positive"),
        (
            "train.lr_base_batch",
            cfg.train.lr_base_batch > 0,
            "must be positive (the lr is base_lr * batch_size / lr_base_batch)",
        ),
        (
            "train.lr_milestones",
            all(m >= 1 for m in cfg.train.lr_milestones)
            and list(cfg.train.lr_milestones) == sorted(set(cfg.train.lr_milestones)),
            "must be increasing epochs >= 1 (the lr is multiplied by 0.1 from each)",
        ),
        ("train.weight_decay", cfg.train.weight_decay >= 0, "must be >= 0"),
        ("train.sgd_momentum", 0 <= cfg.train.sgd_momentum < 1, "must lie in [0, 1)"),
        (
            "train.warmup_epochs",
            0 <= cfg.train.warmup_epochs < cfg.train.epochs,
            "must lie in [0, train.epochs)",
        ),
        ("train.log_every", cfg.train.log_every > 0, "must be positive"),
        (
            "train.lr_first_epoch",
            cfg.train.lr_first_epoch in (0, 1)
            and (cfg.train.lr_first_epoch == 0 or cfg.train.warmup_epochs == 0),
            "must be 0 or 1 (1 only without train.warmup_epochs)",
        ),
        ("train.ckpt_every", cfg.train.ckpt_every > 0, "must be positive"),
        ("train.dist_timeout_min", cfg.train.dist_timeout_min > 0, "must be positive"),
        ("train.threads", cfg.train.threads >= 0, "must be >= 0 (0 = automatic)"),
        ("model.bn_splits", cfg.model.bn_splits >= 1, "must be at least 1"),
        (
            "model.bn_splits",
            cfg.train.batch_size % cfg.model.bn_splits == 0,
            f"must divide train.batch_size ({cfg.train.batch_size})",
        ),
        (
            "data.crop_scale",
            0 < cfg.data.crop_scale[0] <= cfg.data.crop_scale[1] <= 1,
            "must be (low, high) with 0 < low <= high <= 1",
        ),
        ("eval.knn_k", cfg.eval.knn_k > 0, "must be positive"),
        (
            "eval.knn_temperature",
            cfg.eval.knn_temperature > 0,
            "must be positive (the votes are weighted by exp(similarity / T))",
        ),
        ("eval.batch_size", cfg.eval.batch_size > 0, "must be positive"),
        ("data.image_size", cfg.data.image_size > 0, "must be positive"),
        ("data.hflip_prob", 0 <= cfg.data.hflip_prob <= 1, "must lie in [0, 1]"),
        ("data.grayscale_prob", 0 <= cfg.data.grayscale_prob <= 1, "must lie in [0, 1]"),
        ("data.jitter_prob", 0 <= cfg.data.jitter_prob <= 1, "must lie in [0, 1]"),
        ("data.blur_prob", 0 <= cfg.data.blur_prob <= 1, "must lie in [0, 1]"),
        (
            "data.jitter_strength",
            0 <= cfg.data.jitter_strength <= 2,
            "must lie in [0, 2] (ColorJitter's hue, strength / 4, is at most 0.5)",
        ),
        ("data.eval_resize", cfg.data.eval_resize > 0, "must be positive"),
        (
            "data.std",
            all(s > 0 for s in cfg.data.std),
            "must be positive (images are divided by it)",
        ),
        ("model.width", cfg.model.width > 0, "must be positive"),
        ("model.dim", cfg.model.dim > 0, "must be positive"),
        (
            "data.support_views",
            cfg.data.support_views == 0
            or (cfg.data.support_views > 0 and cfg.data.augment_on == "device"),
            "must be 0, or positive with data.augment_on=device (the support crops are batched "
            "in stage 2 like the two views)",
        ),
        (
            "data.support_views",
            cfg.data.support_views > 0 or not loss_cls.needs_support,
            f"must be positive for loss.name={cfg.loss.name!r} (its false negatives are found "
            "through the support views; the official count is 8)",
        ),
        (
            "data.augment_compile",
            not cfg.data.augment_compile or cfg.data.augment_on == "device",
            "compiles stage 2, which only data.augment_on=device has; set it false for workers",
        ),
        ("train.max_steps", cfg.train.max_steps >= 0, "must be 0 (no limit) or positive"),
        ("data.num_workers", cfg.data.num_workers >= -1, "must be -1 (automatic), 0 or positive"),
        (
            "data.decode_on",
            cfg.data.decode_on != "device"
            or (
                cfg.data.augment_on == "device"
                and cfg.data.name in ("imagefolder", "imagenet100")
                and cfg.data.affine_degrees == 0
                and cfg.data.affine_translate == 0
            ),
            "needs image files (data.name imagefolder or imagenet100), "
            "data.augment_on=device and no RandomAffine (data.affine_degrees = "
            "data.affine_translate = 0); use auto or cpu",
        ),
        (
            "data.resident",
            cfg.data.resident != "device"
            or (cfg.data.augment_on == "device" and cfg.data.decode_on != "device"),
            "needs data.augment_on=device (the two-stage augmentation) and data.decode_on auto "
            "or cpu; use auto or off",
        ),
        (
            "data.subset",
            cfg.data.subset == 0
            or 0 < cfg.data.subset < 1
            or (cfg.data.subset >= 1 and cfg.data.subset == int(cfg.data.subset)),
            "must be 0 (all), a fraction in (0, 1) or a whole number of images per class",
        ),
        ("model.kappa_hidden", cfg.model.kappa_hidden >= 0, "must be 0 (no head) or positive"),
        (
            "data.in_classes",
            all(c >= 0 for c in cfg.data.in_classes)
            and len(set(cfg.data.in_classes)) == len(cfg.data.in_classes),
            "must be distinct non-negative class indices",
        ),
        (
            "loss.symmetric",
            not cfg.loss.symmetric or loss_cls.batch_layout,
            f"needs a batch loss ({', '.join(batch_losses)}); {cfg.loss.name} has its own layout",
        ),
        (
            "loss.contrast_queue",
            cfg.loss.contrast_queue or loss_cls.can_drop_queue,
            f"can be turned off for {', '.join(queue_optional)} only",
        ),
        (
            "loss.contrast_queue",
            not (strategy_cls.replaces_queue and cfg.loss.contrast_queue),
            f"must be false with negatives {cfg.negatives.name!r}: its negatives replace the "
            f"queue (use loss.name nt_xent, or another of {', '.join(queue_optional)}, with "
            "loss.contrast_queue=false)",
        ),
        (
            "loss.symmetric",
            not cfg.loss.symmetric or strategy_cls.symmetric_ok,
            f"cannot be combined with negatives {cfg.negatives.name!r}: its per-query negatives "
            "belong to the first view's queries only",
        ),
        (
            "data.train_split",
            not loss_cls.needs_labels
            or (cfg.data.train_split == "train" and cfg.data.name != "stl10"),
            f"{cfg.data.train_split!r} of {cfg.data.name!r} holds unlabelled images; loss "
            f"{cfg.loss.name!r} needs a label for every training image",
        ),
        ("eval.knn_every", cfg.eval.knn_every >= 0, "must be 0 (never) or positive"),
        ("eval.online_probe_lr", cfg.eval.online_probe_lr > 0, "must be positive"),
        (
            "eval.online_probe",
            not (cfg.eval.online_probe and cfg.train.compile),
            "cannot be combined with train.compile (the probe reads the backbone through a hook)",
        ),
        (
            "model.sync_bn",
            not (cfg.model.sync_bn and cfg.model.bn_splits > 1),
            "and model.bn_splits > 1 exclude each other (split BN emulates per-GPU BN)",
        ),
        (
            "model.bn_splits",
            cfg.train.batch_size // cfg.model.bn_splits >= 2,
            "leaves fewer than 2 images per BatchNorm split",
        ),
    ]
    for key, ok, why in checks:
        if not ok:
            section, name = key.split(".")
            raise ConfigError(
                f"config key {key!r} = {getattr(getattr(cfg, section), name)!r} {why}"
            )


def typed_kwargs(cfg: Config) -> Config:
    """``negatives.kwargs`` and ``loss.kwargs`` coerced by their constructor's annotations, as the
    typed keys are (YAML reads ``1e-3`` as a string: ``gamma: 1e-3`` becomes 0.001); a value that
    does not fit is a :class:`ConfigError`. Unknown names and keys are left to :func:`validate`."""
    import negatives  # the registries import torch; config stays importable on its own
    from pretrain import losses

    changes = {}
    for section, registry in (("negatives", negatives.strategies), ("loss", losses.registry)):
        sub = getattr(cfg, section)
        if sub.name not in registry or not sub.kwargs:
            continue
        hints = registry.annotations(sub.name)
        if section == "loss":  # the kappa head's weights sit beside the loss's own
            kappa = typing.get_type_hints(losses.WithKappa.__init__)
            hints.update({k: kappa[k] for k in losses.KAPPA_KWARGS})
        typed = {}
        for key, value in sub.kwargs.items():
            hint = _plain_hint(hints.get(key, Any))
            try:
                typed[key] = (
                    value
                    if value is None
                    else coerce(value, hint, f"{section}.kwargs.{key}", "the config")
                )
            except TypeError:  # a type the config schema does not know: passed as given
                typed[key] = value
        changes[section] = dataclasses.replace(sub, kwargs=typed)
    return dataclasses.replace(cfg, **changes) if changes else cfg


def _plain_hint(hint: Any) -> Any:
    """``Sequence[x]`` (collections.abc) as ``list[x]``, inside unions too, for :func:`coerce`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_plain_hint(a) for a in args)]  # noqa: UP007
    if origin is collections.abc.Sequence:
        return list[args[0]] if args else list
    return hint


def check_loss_kwargs(cfg: Config, loss_cls: Any) -> None:
    """``loss.kwargs``: the loss's own constructor arguments (not those the trainer fills in from
    other keys, ``Loss.from_config``), plus the kappa head's two weights with a kappa head."""
    from pretrain.losses import KAPPA_KWARGS
    from pretrain.losses import registry as losses_registry

    own = dict(cfg.loss.kwargs)
    for key in own:
        if key in loss_cls.from_config:
            raise ConfigError(
                f"config key 'loss.kwargs.{key}': loss {cfg.loss.name!r} takes {key} from "
                f"{loss_cls.from_config[key]}, not from loss.kwargs; set that instead"
            )
    for key in KAPPA_KWARGS:
        if key in own:
            if cfg.model.kappa_hidden <= 0:
                raise ConfigError(
                    f"config key 'loss.kwargs.{key}' is set but the model has no kappa head "
                    "(set model.kappa_hidden, e.g. 512)"
                )
            own.pop(key)
    try:
        losses_registry.check_kwargs(cfg.loss.name, own)
    except ValueError as e:
        raise ConfigError(f"config key 'loss.kwargs': {e}") from None


def derived(cfg: Config, train_size: int, world_size: int = 1) -> dict[str, Any]:
    """Values computed from the config and the data; printed and saved with the run."""
    steps = train_size // cfg.train.batch_size  # drop_last, as MoCo
    return {
        "lr": cfg.train.base_lr * cfg.train.batch_size / cfg.train.lr_base_batch,
        "global_batch": cfg.train.batch_size,
        "per_rank_batch": cfg.train.batch_size // world_size,
        "world_size": world_size,
        "train_size": train_size,
        "steps_per_epoch": steps,
        "total_steps": steps * cfg.train.epochs,
        "queue_fraction_of_train": round(cfg.moco.queue_size / max(train_size, 1), 4),
        "initial_loss_ln_1_plus_K": round(math.log(cfg.moco.queue_size + 1), 4),
    }


def to_dict(cfg: Config) -> dict[str, Any]:
    """Plain nested dict (tuples as lists) for YAML and checkpoints."""

    def plain(v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return plain(dataclasses.asdict(cfg))


def from_dict(raw: dict[str, Any], source: str = "checkpoint") -> Config:
    """Inverse of :func:`to_dict`, with the same strict checks; an older config's moved keys
    are migrated (:func:`migrate`)."""
    cfg = typed_kwargs(merge(Config(), migrate(raw, source), source=source))
    validate(cfg)
    return cfg


def dump(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)
