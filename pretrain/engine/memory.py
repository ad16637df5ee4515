"""How much memory a config needs, estimated from the config alone before anything is built, and
the refusal of a config that cannot fit on this device (exit 2, naming the keys and the estimate)
instead of an allocation that fails with a traceback (``model.width=1024``,
``data.image_size=4096``, 64 FNC support views of 4096**2 pixels).

The estimate, in bytes, is the sum of three terms (float32 throughout: mixed precision only lowers
it, so the estimate is an upper bound there):

- **weights** ``20 P``: the ``P`` parameters of one encoder (:func:`parameters`: the backbone
  counted layer by layer, the projection head, the kappa head), held five times over: the query
  encoder, the momentum (key) encoder, the query's gradients, SGD's momentum buffer and the
  gradients plus weight decay (torch's foreach SGD makes that sum a new copy).
- **activations** ``4 B S**2 (Vq A + Vk L)``: ``B`` images per rank (``train.batch_size`` /
  ranks) of ``S**2`` pixels (``data.image_size``); ``Vq`` views through the query encoder
  (:func:`query_views`) keep ``A`` values per input pixel for the backward pass
  (:func:`activations_per_pixel`: for each convolution, its output channels over its stride's
  area, twice: its output and its BatchNorm's), and ``Vk`` views through the key encoder without
  gradients (:func:`key_views`: both views and ``data.support_views``) hold the largest layer's
  input and output at once, ``L`` per pixel (:func:`largest_per_pixel`).
- **queue** ``4 K D``: ``moco.queue_size`` keys of ``model.dim`` floats (and their labels, 8 B).

It is checked against this device's free memory (:func:`available`): the free memory of the CUDA
device (``torch.cuda.mem_get_info``), or on a CPU the memory the kernel reports available
(``MemAvailable`` of ``/proc/meminfo``; ``os.sysconf`` elsewhere). The shipped recipes fit a
24 GiB machine (digits, CIFAR, STL-10) or an 80 GB GPU (ImageNet-100):
``tests/pretrain/engine/test_memory_estimate.py``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from pretrain.config import Config, ConfigError
from pretrain.runtime import dist

GIB = 2**30
FLOAT = 4  # bytes

#: torchvision's ResNets: (block, blocks per stage); stage i has 64 * 2**i base channels
TORCHVISION = {"resnet18": ("basic", (2, 2, 2, 2)), "resnet34": ("basic", (3, 4, 6, 3)),
               "resnet50": ("bottleneck", (3, 4, 6, 3))}  # fmt: skip


@dataclass(frozen=True)
class Estimate:
    """The three terms of the estimate, in bytes."""

    weights: int
    activations: int
    queue: int

    @property
    def total(self) -> int:
        return self.weights + self.activations + self.queue


def _stages(cfg: Config) -> tuple[str, list[int], list[int], int]:
    """(block kind, blocks per stage, each stage's base width, stem width) of the backbone."""
    m = cfg.model
    if m.arch == "resnet_small":
        return "basic", [1, 1, 1, 1], [m.width * 2**i for i in range(4)], m.width
    kind, blocks = TORCHVISION[m.arch]
    return kind, list(blocks), [64 * 2**i for i in range(4)], 64


def _convs(cfg: Config) -> list[tuple[int, int, int, int]]:
    """Every convolution of the backbone as (in channels, out channels, kernel size, its output's
    stride from the input image), in order, and each kept tensor that is not a convolution's (the
    max-pool's output, a block's sum) as (channels, channels, 0, stride). torchvision's blocks:
    a BasicBlock strides its first 3x3, a Bottleneck its 3x3 (the 1x1 before it reads the block's
    input), the downsample's 1x1 strides as the block does."""
    kind, blocks, widths, stem = _stages(cfg)
    cifar = cfg.model.cifar_stem
    out = [(3, stem, 3 if cifar else 7, 1 if cifar else 2)]
    stride = 1 if cifar else 4  # after the stem's stride 2 and the max-pool's
    if not cifar:
        out.append((stem, stem, 0, stride))
    c_in, expansion = stem, 4 if kind == "bottleneck" else 1
    for i, (n, width) in enumerate(zip(blocks, widths)):
        new, c_out = stride * (2 if i > 0 else 1), width * expansion
        for b in range(n):
            if kind == "basic":
                out += [(c_in, width, 3, new), (width, width, 3, new)]
            else:
                out += [(c_in, width, 1, stride if b == 0 else new), (width, width, 3, new),
                        (width, c_out, 1, new)]  # fmt: skip
            if b == 0 and (c_in != c_out or new != stride):
                out.append((c_in, c_out, 1, new))  # the downsample
            out.append((c_out, c_out, 0, new))  # the block's sum
            c_in = c_out
        stride = new
    return out


def feature_dim(cfg: Config) -> int:
    kind, _, widths, _ = _stages(cfg)
    return widths[-1] * (4 if kind == "bottleneck" else 1)


def parameters(cfg: Config) -> int:
    """The parameters of one encoder (:class:`pretrain.model.encoders.Encoder`): each convolution's
    weights (no bias) and its BatchNorm's weight and bias, the projection head (MoCo v2's
    Linear(d, d)-ReLU-Linear(d, dim), v1's Linear(d, dim), with biases), the kappa head
    (Linear(d, h, no bias)-BN-Linear(h, 1))."""
    total = 0
    for c_in, c_out, k, _ in _convs(cfg):
        if k:
            total += c_in * c_out * k * k + 2 * c_out
    d, dim, h = feature_dim(cfg), cfg.model.dim, cfg.kappa.hidden
    total += (d * d + d + d * dim + dim) if cfg.model.mlp else (d * dim + dim)
    total += (d * h + 2 * h + h + 1) if h else 0
    return total


def activations_per_pixel(cfg: Config) -> float:
    """Activation values kept per input pixel for the backward pass: each convolution's output
    channels over the area of its stride from the input, twice (the convolution's output and its
    BatchNorm's; torchvision's ReLUs work in place), and the max-pool's output and each block's
    sum once."""
    return sum((2 * c_out if k else c_out) / s**2 for _, c_out, k, s in _convs(cfg))


def largest_per_pixel(cfg: Config) -> float:
    """The largest tensor of a forward pass without gradients, per input pixel: a layer's input
    and output are alive at once, so twice the largest output."""
    return 2 * max(c_out / s**2 for _, c_out, _, s in _convs(cfg))


def estimate(cfg: Config, world_size: int = 1) -> Estimate:
    """The memory one rank of ``cfg`` needs (the module's docstring gives the formula)."""
    batch = max(cfg.train.batch_size // max(world_size, 1), 1)
    pixels = batch * cfg.data.image_size**2
    kept = pixels * query_views(cfg) * activations_per_pixel(cfg)
    passing = pixels * key_views(cfg) * largest_per_pixel(cfg)
    return Estimate(
        weights=5 * FLOAT * parameters(cfg),
        activations=int(FLOAT * (kept + passing)),
        queue=cfg.moco.queue_size * (FLOAT * cfg.model.dim + 8),
    )


def query_views(cfg: Config) -> int:
    """Views through the query encoder, whose activations are kept: both with
    ``loss.symmetric``, else one."""
    return 2 if cfg.loss.symmetric else 1


def key_views(cfg: Config) -> int:
    """Views through the key encoder without gradients (counted all at once: conservative): both
    views and ``data.support_views``."""
    return 2 + cfg.data.support_views


def available(device: torch.device) -> int:
    """This device's free memory in bytes: CUDA's free memory, or the CPU's available memory."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check(cfg: Config, device: torch.device) -> None:
    """:class:`ConfigError` on every rank when :func:`problem` finds one on any (a rank that
    exits alone would leave the others waiting at their first collective)."""
    why = problem(cfg, device, dist.world_size())
    if dist.any_rank(bool(why)):
        raise ConfigError(
            why
            or "another rank of this job lacks the memory the config needs (its error names "
            "the keys and the estimate)"
        )


def problem(cfg: Config, device: torch.device, world_size: int = 1) -> str:
    """Why :func:`estimate` exceeds :func:`available` here, naming the keys of each term and
    its size, or ''."""
    need, have = estimate(cfg, world_size), available(device)
    if need.total <= have:
        return ""
    m, d = cfg.model, cfg.data
    batch = max(cfg.train.batch_size // max(world_size, 1), 1)
    arch = f"model.arch={m.arch}" + (f", model.width={m.width}" if m.arch == "resnet_small" else "")
    return (
        f"the config needs about {need.total / GIB:.1f} GiB and this {device.type} has "
        f"{have / GIB:.1f} GiB free: weights {need.weights / GIB:.1f} GiB ({arch}), activations "
        f"{need.activations / GIB:.1f} GiB (train.batch_size={cfg.train.batch_size} = {batch} "
        f"images per rank, data.image_size={d.image_size}, {query_views(cfg)} query and "
        f"{key_views(cfg)} key views with data.support_views={d.support_views}), queue "
        f"{need.queue / GIB:.1f} GiB (moco.queue_size={cfg.moco.queue_size}, "
        f"model.dim={m.dim}); lower the largest, or train on a device with more memory (the "
        "estimate's formula: pretrain/engine/memory.py)"
    )
