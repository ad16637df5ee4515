"""The one schema with every default; YAML files and the command line hold overrides only
(:mod:`pretrain.config.load`). Every key's description is data: the ``Keys:`` table of its
section's docstring (``scripts/gen_config_docs.py`` reads it into docs/configuration.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pretrain.config import rules

CONFIG_DIR = Path(__file__).parent.parent / "configs"


@dataclass
class DataConfig:
    """``data.*``: the dataset, its splits, the two views' augmentation and the input pipeline.

    Keys:
        name: digits | cifar10 | cifar100 | stl10 | imagefolder | imagenet100
        root: dataset folder; never downloaded at run time
        image_size: crop size of the training views (and of the eval centre crop)
        eval_resize: eval: resize the short side to this, then centre-crop image_size
        crop_scale: RandomResizedCrop scale (MoCo v2)
        affine_degrees: RandomAffine rotation; 0 = off (useful for digits)
        affine_translate: RandomAffine translation fraction; 0 = off
        jitter_strength: ColorJitter(b=c=s=strength, hue=strength/4); 0 = off
        jitter_prob: MoCo v2
        grayscale_prob: MoCo v2
        blur_prob: MoCo v2 GaussianBlur sigma in [0.1, 2]; CIFAR recipes turn it off
        hflip_prob: MoCo v2; digits must not be mirrored
        mean: ImageNet statistics
        std: per-channel std of the normalisation (ImageNet statistics)
        num_workers: DataLoader processes per rank; -1 = this rank's share of the cores minus one
            (the training process's; pretrain/runtime/cores.py); explicit counts are capped at that
        augment_on: device: crops in workers, photometric ops batched on the training device
            (pretrain/data/augment.py); workers: all per sample in workers (the reference)
        decode_on: where training JPEGs are decoded and cropped: cpu (loader workers), device (whole
            batch in the training process, nvjpeg on CUDA; docs/gpu_decode.md), auto = cpu (measured
            faster on the latest GPU run; device is opt-in)
        resident: device: the training split decoded once (image files cached in RUN/cache or
            $NEGMINE_CACHE_DIR), held as uint8 on the training device, batches and both views'
            augmentation made there (no DataLoader); off: loader workers; auto = device on CUDA when
            it fits in half the free device memory (docs/input-pipeline.md#resident-training-set)
        augment_compile: torch.compile stage 2 (augment_on: device): ~3x less CPU per image at 32 px
            on a CPU; ~30 s of compile at the first step; needs a C++ compiler on a CPU
        train_split: stl10 pretraining uses "train+unlabeled"; imagefolder: a folder under root or
            an image-list file (*.txt, lines "relative/path label")
        test_split: imagefolder: held-out folder (test/, else val/) or image list
        subset: 0 = all; >= 1: that many training images per class; in (0, 1): that fraction of each
            class; drawn with the seed (smoke tests on real data)
        skip_bad_images: replace unreadable images by the next one and count them
        resume_on_changed_data: resume although the training set differs from the checkpoint's (its
            size or digest; pretrain/data/identity.py): refused (exit 2) otherwise
        in_classes: one-class / subset training: the in-distribution classes kept in the training
            set and the kNN bank; [] = all classes
        support_views: extra augmented views per image through the key encoder: FNC's support set
            for finding false negatives (loss.name fnc; official 8); needs augment_on device
    """

    name: str = "digits"
    root: str = "data"
    image_size: int = 224
    eval_resize: int = 256
    crop_scale: tuple[float, float] = (0.2, 1.0)
    affine_degrees: float = 0.0
    affine_translate: float = 0.0
    jitter_strength: float = 0.4
    jitter_prob: float = 0.8
    grayscale_prob: float = 0.2
    blur_prob: float = 0.5
    hflip_prob: float = 0.5
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    num_workers: int = -1
    augment_on: str = "device"
    decode_on: str = "auto"
    resident: str = "auto"
    augment_compile: bool = False
    train_split: str = "train"
    test_split: str = "test"
    subset: float = 0.0
    skip_bad_images: bool = False
    resume_on_changed_data: bool = False
    in_classes: list[int] = field(default_factory=list)
    support_views: int = 0


@dataclass
class ModelConfig:
    """``model.*``: the backbone, the projection head, split BatchNorm and the kappa head.

    Keys:
        arch: resnet_small | resnet18 | resnet34 | resnet50
        width: resnet_small only: channels of the first stage
        cifar_stem: 3x3 stride-1 conv1 and no max-pool (CIFAR recipes)
        dim: output dimension of the projection head (MoCo)
        mlp: MoCo v2 head Linear-ReLU-Linear; False = single Linear (MoCo v1)
        bn_splits: >1: split BatchNorm + key shuffle on one device (MoCo CIFAR recipe)
        split_bn: bn_splits > 1, its training kernels: auto (triton on CUDA, per_split on a CPU),
            triton (4 launches per layer), triton_onepass (2 launches per layer, fewer programs),
            fused (aten ops), per_split (a batch_norm per split)
        sync_bn: DDP: SyncBatchNorm in both encoders instead of shuffle-BN
    """

    arch: str = "resnet50"
    width: int = 32
    cifar_stem: bool = False
    dim: int = 128
    mlp: bool = True
    bn_splits: int = 1
    split_bn: str = "auto"
    sync_bn: bool = False


@dataclass
class MocoConfig:
    """``moco.*``: MoCo's queue, momentum and temperature.

    Keys:
        queue_size: K; must not exceed the training set
        momentum: m in key <- m * key + (1 - m) * query
        temperature: MoCo v2 (v1 and the reference code default: 0.07)
        symmetric_keys: the MoCo CIFAR-10 demo's symmetric loss (its --symmetric): each view
            is query and key in turn, InfoNCE(q1, k2) + InfoNCE(q2, k1) against the same queue,
            one momentum update then a shuffled key forward of each view, and both views' keys
            (2 x train.batch_size) enqueued; infonce with no negative strategy only. Not
            loss.symmetric, the multiview layout (both views through the query encoder
            against each other, no key of view 1)
    """

    queue_size: int = 65536
    momentum: float = 0.999
    temperature: float = 0.2
    symmetric_keys: bool = False


@dataclass
class TrainConfig:
    """``train.*``: the optimizer, its schedule, precision and the run's checkpoints.

    Keys:
        epochs: training epochs
        batch_size: global batch (split across ranks)
        base_lr: lr for a global batch of lr_base_batch; scaled linearly
        lr_base_batch: the global batch that base_lr is given for
        lr_schedule: cosine | step
        lr_milestones: step schedule only
        lr_per_epoch: MoCo sets the lr once per epoch; False = per step
        lr_first_epoch: epoch number the schedule reads in the first epoch: 0 as main_moco.py; 1 as
            the MoCo CIFAR-10 colab (0.06 * 0.5 * (1 + cos(pi * 1/200)) in epoch 1)
        warmup_epochs: linear warm-up from 0, in epochs
        weight_decay: SGD weight decay (MoCo)
        sgd_momentum: SGD momentum (MoCo)
        wd_exclude_bias_and_norm: MoCo decays every parameter
        amp: encoders' autocast: auto (bf16 on CUDA and on bf16-capable CPUs) | bf16 (CPU or CUDA) |
            fp16 (CUDA) | off; negatives and loss stay float32 (pretrain/runtime/precision.py)
        channels_last: NHWC encoders and batches on CUDA, and on a CPU under bf16 autocast (faster
            there); fp32 CPU runs stay contiguous (pretrain/runtime/precision.py)
        threads: torch intra-op threads per rank; 0 = auto (pretrain/runtime/threads.py: 1 on a
            share of <= 4 cores, else the share); the env NEGMINE_THREADS overrides
        compile: torch.compile the encoders' forward (modules and state dicts unchanged)
        cuda_graphs: capture the whole step as one CUDA graph and replay it
            (pretrain/engine/cuda_graphs.py): auto (captured on one CUDA device where nothing
            refuses it and a GPU run compared that step with eager: MoCo's InfoNCE step; else
            eager, saying why) | on (any step nothing refuses; a refusal is exit 2) | off (eager)
        deterministic: deterministic kernels; exact replay after resume on CPU
        log_every: steps between metrics.jsonl/TensorBoard step lines (one host sync each)
        ckpt_every: epochs between writes of checkpoints/last.pt
        keep_every: also keep checkpoints/epoch_N.pt every N epochs; 0 = never
        progress_bar: tqdm bar (hidden automatically when stderr is not a terminal)
        max_steps: > 0: stop after this many global steps with a checkpoint, as a stop signal does
            (raise it, or set 0, and run the same command to continue)
        max_requeues: SLURM: requeues after preemption or time limit before giving up
        dist_timeout_min: DDP: collective timeout (NCCL's default is 10): ranks wait this long in a
            barrier while rank 0 runs the kNN monitor; raise it for a large eval set
    """

    epochs: int = 200
    batch_size: int = 256
    base_lr: float = 0.03
    lr_base_batch: int = 256
    lr_schedule: str = "cosine"
    lr_milestones: list[int] = field(default_factory=lambda: [120, 160])
    lr_per_epoch: bool = True
    lr_first_epoch: int = 0
    warmup_epochs: float = 0.0
    weight_decay: float = 1e-4
    sgd_momentum: float = 0.9
    wd_exclude_bias_and_norm: bool = False
    amp: str = "auto"
    channels_last: bool = True
    threads: int = 0
    compile: bool = False
    cuda_graphs: str = "auto"
    deterministic: bool = False
    log_every: int = 50
    ckpt_every: int = 1
    keep_every: int = 0
    progress_bar: bool = True
    max_steps: int = 0
    max_requeues: int = 100
    dist_timeout_min: float = 60.0


@dataclass
class EvalConfig:
    """``eval.*``: the kNN monitor and the online probe during pretraining.

    Keys:
        knn_every: epochs between kNN monitor runs; 0 = never (the last epoch always runs)
        online_probe: a stop-gradient linear probe trained during pretraining on the backbone
            features (labels needed); logs online_train_top1 / online_test_top1 every epoch
        online_probe_lr: its SGD lr (momentum 0.9, no weight decay, constant)
        knn_k: InstDisc / MoCo CIFAR demo
        knn_features: backbone (pooled, as linear_eval) | head (the projection head's output, as the
            MoCo CIFAR colab's monitor) | head+backbone (both; first = knn_top1)
        knn_temperature: T of the kNN votes' weights exp(similarity / T)
        batch_size: feature extraction batch
    """

    knn_every: int = 10
    online_probe: bool = False
    online_probe_lr: float = 0.1
    knn_k: int = 200
    knn_features: str = "backbone"
    knn_temperature: float = 0.1
    batch_size: int = 256


@dataclass
class LossConfig:
    """The loss (``pretrain.losses``); MoCo's ``moco.temperature`` is its T.

    Keys:
        name: a registered loss (pretrain.losses.list_losses()); the configuration reference lists
            each one's settings
        symmetric: both views through the query encoder, anchors [q1; q2] against each other: the
            papers' 2N x 2N layout (nt_xent, supcon, sincere, firm, cider, kappa terms); MoCo's
            two-direction loss with a key of each view is moco.symmetric_keys instead
        contrast_queue: False: the batch alone is the contrast set (no queue); with symmetric it is
            the papers' equation exactly, without it FIRM's authors' N x N training loss
        kwargs: the loss's own settings (its constructor's keyword arguments, checked against its
            signature and typed by its annotations)
    """

    name: str = "infonce"
    symmetric: bool = False
    contrast_queue: bool = True
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class KappaConfig:
    """``kappa.*``: the kappa (concentration) head of vMF-κ and its two loss terms, beside any loss.

    Keys:
        hidden: >0: a kappa head with this hidden width (vMF-κ: 512); 0 = no head
        lambda_align: λ_align of L_align (eq. 10 of vMF-κ: 0.05), with a kappa head
        lambda_reg: λ_reg of L_reg (eq. 11 of vMF-κ: 0.005), with a kappa head
    """

    hidden: int = 0
    lambda_align: float = 0.05
    lambda_reg: float = 0.005


@dataclass
class NegativesConfig:
    """``negatives.*``: the negative strategy (``negatives.list_strategies()``).

    Keys:
        name: a key of negatives.list_strategies()
        kwargs: the strategy's own settings, passed to negatives.create(name, ...) and checked
            against its signature
    """

    name: str = "none"
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Config:
    """The config of a run: the sections below and the keys of the top level.

    Keys:
        out_dir: run directory; empty = runs/<config file stem>
        seed: the run's seed (weights, data order, augmentation)
        plugins: strategies and losses of one's own to load first: a Python file (path/to/mine.py)
            or module[:Class]; an installed package's are found through its entry points
            (negmine.strategies, negmine.losses) without this key
    """

    out_dir: str = ""
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    moco: MocoConfig = field(default_factory=MocoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    kappa: KappaConfig = field(default_factory=KappaConfig)
    negatives: NegativesConfig = field(default_factory=NegativesConfig)
    plugins: list[str] = field(default_factory=list)


CHOICES = {
    "data.name": ("digits", "cifar10", "cifar100", "stl10", "imagefolder", "imagenet100"),
    "model.arch": ("resnet_small", "resnet18", "resnet34", "resnet50"),
    "model.split_bn": ("auto", "triton", "triton_onepass", "fused", "per_split"),
    "train.lr_schedule": ("cosine", "step"),
    "train.amp": ("auto", "bf16", "fp16", "off"),
    "train.cuda_graphs": ("auto", "on", "off"),
    "data.augment_on": ("device", "workers"),
    "data.decode_on": ("auto", "cpu", "device"),
    "data.resident": ("auto", "off", "device"),
    "eval.knn_features": ("backbone", "head", "head+backbone", "backbone+head"),
}


def registered_choices() -> dict[str, list[str]]:
    """The names the registries hold (``loss.name``, ``negatives.name``): one list, never copied
    here, so a new loss or strategy file is a valid config value with no edit to this module."""
    return {key: registry.names() for key, registry in rules.registries().items()}
