"""The two MoCo v2 set side by side by benchmarks/peers.py: lightly's CIFAR-10 benchmark model
(``MocoModel`` of lightly's ``docs/source/getting_started/benchmarks/cifar10_benchmark.py``) in a
plain PyTorch loop, and negmine's ``cifar10_moco.yaml`` set to the same settings.

    from benchmarks.peers_models import Sizes, LightlyMoco, negmine_overrides

``Sizes`` holds what both get: the ResNet (lightly's ``ResNetGenerator`` name and width multiplier;
negmine ``resnet18``, or ``resnet_small`` for lightly's one-block-per-stage ``resnet-9``, whose
``model.width`` is 64 x the multiplier), batch, queue, temperature, momentum, BN splits, epochs.
:data:`MATCHED` says what is set alike beyond the sizes (the loss layout and scale),
:data:`UNMATCHED` what cannot be (both printed with every table).
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass

import torch
from torch import nn

ARCHS = {"resnet-18": "resnet18", "resnet-9": "resnet_small"}  # lightly name -> negmine arch
#: The precision of a pair, the same on both sides: negmine's ``train.amp`` for it, and lightly's
#: encoders under ``torch.autocast`` in that dtype (None: none) with the loss in float32, as
#: negmine's policy (pretrain/runtime/precision.py). Never ``train.amp=auto``, which picks bf16 or
#: fp32 by the CPU and would pair a bf16 negmine with an fp32 lightly on a bf16-capable CPU.
PRECISIONS = {"fp32": ("off", None), "bf16": ("bf16", torch.bfloat16)}
LR, WD = 0.06, 5e-4  # lightly's benchmark: SGD lr 0.06 x batch/128, weight decay 5e-4
LOSS_SCALE = 2.0  # negmine's symmetric loss (a sum of the two terms) over lightly's (their mean)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # lightly's default

#: What is set alike by construction beyond the sizes (printed with every table).
MATCHED = [
    "loss layout: the two-key symmetric loss on both: q(x0)-k(x1) and q(x1)-k(x0), each "
    "InfoNCE against the memory bank / queue, two key forwards, 2N keys enqueued per step "
    "(lightly's benchmark step; negmine's moco.symmetric_keys + loss.name=infonce, the MoCo "
    "CIFAR-10 demo's)",
    "loss scale: lightly's step returns the mean of its two terms, 0.5 (loss_1 + loss_2); "
    "negmine's the sum, loss_12 + loss_21 (the demo's): twice the gradient. negmine runs at "
    "half the learning rate and twice the weight decay, which makes its SGD updates lightly's "
    "(momentum buffer 2x, step lr/2: the same parameters after every step)",
]

UNMATCHED = [
    "memory bank order: lightly's second term sees its bank after the first term's enqueue (N "
    "of the oldest negatives replaced by this step's k(x1), among them the key of the query's "
    "own image); negmine's two terms both see the queue before the step (the demo's), and "
    "enqueue 2N keys after",
    "stem: lightly's backbone is nn.Sequential(*children[:-1]) of its ResNet, which drops the "
    "ReLU after the first BN (its forward applies F.relu, the Sequential does not); negmine's "
    "has it. Same parameters",
    "split BN: lightly's SplitBatchNorm (the MoCo colab's) runs one batch_norm over the batch "
    "viewed as C x splits channels and averages the per-split running statistics for eval; "
    "negmine's model.split_bn=auto picks per_split (a batch_norm per split) on a CPU and its "
    "Triton kernels on CUDA. The same statistics in training",
    "loader: lightly's DataLoader as its benchmark builds it (shuffle, drop_last, no pinned "
    "memory, workers started anew every epoch) with negmine's worker count for both (the "
    "benchmark's is 8); negmine's loader keeps its workers across epochs and pins memory on CUDA",
    "loop: lightly's benchmark runs under PyTorch Lightning (hooks, self.log each step); here "
    "its model runs in a plain loop (backward, SGD step, zero_grad), which can only flatter it",
    "augmentation: lightly's benchmark MocoModel uses SimCLRTransform(input_size=32, "
    "cj_strength=0.5, gaussian_blur=0.0); here MoCoV2Transform(input_size=32, min_scale=0.08, "
    "gaussian_blur=0.0), the same ops and strengths (crop scale 0.08-1, jitter 0.4/0.4/0.4/0.1 "
    "p 0.8, grey 0.2, flip 0.5, ImageNet normalisation); negmine runs its two-stage pipeline "
    "with those values (data.mean/std set to ImageNet's)",
    "memory bank: lightly 1.6 wants memory_bank_size=(4096, 128) (the benchmark's 4096 is "
    "refused since 1.6); its bank starts random, negmine's queue too",
    "learning rate: lightly's benchmark scales 0.06 by batch/128 (lr_factor), not batch/512 as "
    "the MoCo colab; negmine is set to the same schedule (train.lr_base_batch 128, at half the "
    "rate for its summed loss: MATCHED), cosine over the epochs run, set once per epoch on both",
]


@dataclass(frozen=True)
class Sizes:
    arch: str = "resnet-18"  # lightly's ResNetGenerator name (ARCHS)
    width: float = 1.0  # lightly's width multiplier; negmine resnet_small width = 64 x this
    batch: int = 512
    queue: int = 4096
    temperature: float = 0.1
    momentum: float = 0.99
    splits: int = 8
    dim: int = 128
    epochs: int = 200  # the cosine schedule's length (both)
    precision: str = "fp32"  # both sides: fp32, or bf16 autocast of the encoders (PRECISIONS)

    @property
    def lr(self) -> float:
        return LR * self.batch / 128  # lightly's benchmark: lr_factor = batch_size / 128


class LightlyMoco(nn.Module):
    """lightly's benchmark ``MocoModel`` without Lightning: the same modules and training_step."""

    def __init__(self, s: Sizes) -> None:
        super().__init__()
        from lightly.loss import NTXentLoss
        from lightly.models import ResNetGenerator, utils
        from lightly.models.modules import heads

        resnet = ResNetGenerator(s.arch, width=s.width, num_splits=s.splits)
        feat = resnet.linear.in_features
        self.backbone = nn.Sequential(*list(resnet.children())[:-1], nn.AdaptiveAvgPool2d(1))
        self.projection_head = heads.MoCoProjectionHead(feat, feat, s.dim)
        self.backbone_momentum = copy.deepcopy(self.backbone)
        self.projection_head_momentum = copy.deepcopy(self.projection_head)
        utils.deactivate_requires_grad(self.backbone_momentum)
        utils.deactivate_requires_grad(self.projection_head_momentum)
        self.criterion = NTXentLoss(temperature=s.temperature, memory_bank_size=(s.queue, s.dim))
        self.momentum, self.utils = s.momentum, utils
        self.dtype = PRECISIONS[s.precision][1]

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The pooled backbone features (the kNN's input, as lightly's BenchmarkModule)."""
        return self.backbone(x).flatten(start_dim=1)

    def training_step(self, x0: torch.Tensor, x1: torch.Tensor) -> torch.Tensor:
        u = self.utils
        u.update_momentum(self.backbone, self.backbone_momentum, self.momentum)
        u.update_momentum(self.projection_head, self.projection_head_momentum, self.momentum)

        def step(x0_: torch.Tensor, x1_: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            x1_, shuffle = u.batch_shuffle(x1_)
            with self.autocast(x0_.device):  # the encoders; the loss in float32 below
                x0_ = self.projection_head(self.backbone(x0_).flatten(start_dim=1))
                x1_ = self.projection_head_momentum(
                    self.backbone_momentum(x1_).flatten(start_dim=1)
                )
            return x0_.float(), u.batch_unshuffle(x1_.float(), shuffle)

        loss_1 = self.criterion(*step(x0, x1))  # the symmetric loss, as the benchmark
        loss_2 = self.criterion(*step(x1, x0))
        return 0.5 * (loss_1 + loss_2)

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        """The encoders' autocast at the pair's precision (a null context in fp32)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.dtype)

    def trained_parameters(self) -> list[nn.Parameter]:
        return list(self.backbone.parameters()) + list(self.projection_head.parameters())

    def optimizer(self, s: Sizes) -> tuple[torch.optim.Optimizer, object]:
        optim = torch.optim.SGD(self.trained_parameters(), lr=s.lr, momentum=0.9,
                                weight_decay=WD)  # fmt: skip
        return optim, torch.optim.lr_scheduler.CosineAnnealingLR(optim, s.epochs)


def lightly_transforms(s: Sizes) -> tuple[object, object]:
    """(training transform: two views, eval transform) as lightly's benchmark builds them."""
    import torchvision
    from lightly.transforms import MoCoV2Transform

    train = MoCoV2Transform(input_size=32, min_scale=0.08, gaussian_blur=0.0)
    test = torchvision.transforms.Compose([
        torchvision.transforms.ToTensor(),
        torchvision.transforms.Normalize(mean=IMAGENET_MEAN, std=IMAGENET_STD),
    ])  # fmt: skip
    return train, test


def negmine_overrides(s: Sizes, root: str) -> list[str]:
    """cifar10_moco.yaml's overrides for the settings of ``s`` on the image folder ``root``."""
    arch = ARCHS[s.arch]
    width = [f"model.width={round(64 * s.width)}"] if arch == "resnet_small" else []
    if arch == "resnet18" and s.width != 1.0:
        raise ValueError("negmine's resnet18 has no width multiplier; use resnet-9 to shrink")
    return [
        "data.name=imagefolder", f"data.root={root}",
        f"data.mean={list(IMAGENET_MEAN)}", f"data.std={list(IMAGENET_STD)}",
        "data.crop_scale=[0.08, 1.0]", "data.jitter_strength=0.4", "data.jitter_prob=0.8",
        "data.grayscale_prob=0.2", "data.blur_prob=0.0", "data.hflip_prob=0.5",
        f"model.arch={arch}", *width, "model.cifar_stem=true", "model.mlp=true",
        f"model.dim={s.dim}", f"model.bn_splits={s.splits}",
        f"moco.queue_size={s.queue}", f"moco.momentum={s.momentum}",
        f"moco.temperature={s.temperature}",
        "moco.symmetric_keys=true", "loss.name=infonce",  # lightly's two-key layout
        # the sum of two means (lightly: their mean) at half the lr and twice the weight decay:
        # the same SGD updates as lightly's 0.06 x batch/128 and 5e-4 (MATCHED)
        f"train.batch_size={s.batch}", f"train.base_lr={LR / LOSS_SCALE:g}",
        "train.lr_base_batch=128", f"train.amp={PRECISIONS[s.precision][0]}",
        f"train.weight_decay={WD * LOSS_SCALE:g}", "train.sgd_momentum=0.9",
        "train.lr_schedule=cosine",
        "train.lr_per_epoch=true", "train.lr_first_epoch=0", "train.warmup_epochs=0",
        f"train.epochs={s.epochs}", "train.progress_bar=false", "eval.knn_every=0",
    ]  # fmt: skip


def parameter_counts(backbone: nn.Module, head: nn.Module) -> tuple[int, int]:
    return (sum(p.numel() for p in backbone.parameters()),
            sum(p.numel() for p in head.parameters()))  # fmt: skip
