"""Backbones, the MoCo v2 head, split BatchNorm (:mod:`pretrain.model.split_bn`) and the
momentum-encoder MoCo module.

The MoCo module follows facebookresearch/moco ``moco/builder.py`` (at b8ae0d9): query encoder with
gradient; under ``no_grad`` the momentum update first, then the key forward; the key encoder is an
exact copy that never receives gradients. Modules take plain arguments, never the config.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torchvision import models
from torchvision.models.resnet import BasicBlock

from negmine_core.step import Batch, Embeddings
from pretrain.model.key_cast import KeyCast, cast_tree
from pretrain.model.split_bn import SplitBatchNorm
from pretrain.runtime import dist


def norm_layer(bn_splits: int) -> Callable[[int], nn.Module]:
    if bn_splits > 1:
        return lambda c: SplitBatchNorm(c, bn_splits)
    return nn.BatchNorm2d


class FusedBasicBlock(BasicBlock):
    """torchvision's BasicBlock (He et al. 2016, Fig. 2: y = relu(F(x) + shortcut(x))) whose two
    ReLUs and shortcut sum are done by its split BatchNorms (:attr:`SplitBatchNorm.act`):
    ``bn1`` returns relu(BN(conv1 x)), ``bn2`` relu(BN(conv2 ...) + shortcut). The same modules,
    parameters and state-dict keys as BasicBlock, and the same values: on split BN's triton path
    the sum and the ReLU launch no kernels of their own, elsewhere they are BasicBlock's ops. Used
    where the norm layer is :class:`SplitBatchNorm` (``model.bn_splits`` > 1)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.bn1.act = self.bn2.act = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        return self.bn2(self.conv2(self.bn1(self.conv1(x))), shortcut)


def fuse_stem(net: nn.Module) -> None:
    """The stem's ReLU done by its split BN (``bn1.act``; ``net.relu`` becomes an identity: the
    torchvision ResNet and :class:`SmallResNet` use it in the stem only)."""
    net.bn1.act = True
    net.relu = nn.Identity()


class SmallResNet(nn.Module):
    """A four-block ResNet (one torchvision BasicBlock per stage) of configurable width, for CPU."""

    def __init__(
        self,
        width: int = 32,
        norm: Callable[[int], nn.Module] = nn.BatchNorm2d,
        block: type[BasicBlock] = BasicBlock,
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = norm(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, c_in = [], width
        for i in range(4):
            c_out, stride = width * 2**i, 1 if i == 0 else 2
            down = None
            if stride != 1 or c_in != c_out:
                down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), norm(c_out))
            stages.append(block(c_in, c_out, stride, down, norm_layer=norm))
            c_in = c_out
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Identity()
        self.feature_dim = c_in

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def backbone(arch: str, width: int = 32, cifar_stem: bool = False, bn_splits: int = 1) -> nn.Module:
    """A ResNet without its classifier: ``forward`` returns pooled features (N, feature_dim)."""
    norm = norm_layer(bn_splits)
    fused = bn_splits > 1  # split BN does the ReLUs and shortcut sums (FusedBasicBlock)
    block = FusedBasicBlock if fused else BasicBlock
    if arch == "resnet_small":
        net = SmallResNet(width, norm, block)
    elif arch in ("resnet18", "resnet34"):  # torchvision's resnet18/34 builders, our block
        net = models.ResNet(block, BLOCKS[arch], norm_layer=norm)
    elif arch == "resnet50":  # Bottleneck: its ReLUs and sum stay its own
        net, fused = models.resnet50(weights=None, norm_layer=norm), False
    else:
        raise ValueError(
            f"unknown arch {arch!r}; choose resnet_small, resnet18, resnet34, resnet50"
        )
    if arch != "resnet_small":
        net.feature_dim = net.fc.in_features
        net.fc = nn.Identity()
    if cifar_stem:  # moco colab ModelBase / solo-learn: 3x3 stride-1 conv1, no max-pool
        net.conv1 = nn.Conv2d(3, net.conv1.out_channels, 3, 1, 1, bias=False)
        net.maxpool = nn.Identity()
    if fused:
        fuse_stem(net)
    return net


BLOCKS = {"resnet18": [2, 2, 2, 2], "resnet34": [3, 4, 6, 3]}  # torchvision's resnet18 / 34


def arch_label(arch: str, width: int) -> str:
    """The backbone as a table title names it: ``width`` only where it sizes the network
    (``resnet_small``); torchvision's ResNets ignore it (``backbone`` above)."""
    return f"{arch} width {width}" if arch == "resnet_small" else arch


def projection_head(in_dim: int, out_dim: int, mlp: bool) -> nn.Module:
    """MoCo v2 head: Linear(d, d)-ReLU-Linear(d, out), both with bias, no BN; v1: one Linear."""
    if not mlp:
        return nn.Linear(in_dim, out_dim)
    return nn.Sequential(
        nn.Linear(in_dim, in_dim), nn.ReLU(inplace=True), nn.Linear(in_dim, out_dim)
    )


class Norm1d(nn.Module):
    """A 2-d norm layer (BatchNorm2d or SplitBatchNorm) applied to (N, C) features, so a head's BN
    is split per sub-batch exactly as the backbone's (one process = DDP)."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x[:, :, None, None]).flatten(1)


def kappa_head(in_dim: int, hidden: int = 512, bn_splits: int = 1) -> nn.Module:
    """Concentration head of vMF-κ (§3, appendix F): Linear(no bias)-BN-ReLU-Linear(1).

    The encoder applies ``softplus`` (torch default beta 1, threshold 20) to its output, so
    kappa > 0.
    """
    return nn.Sequential(
        nn.Linear(in_dim, hidden, bias=False),
        Norm1d(norm_layer(bn_splits)(hidden)),
        nn.ReLU(inplace=True),
        nn.Linear(hidden, 1),
    )


class Encoder(nn.Module):
    """Backbone followed by the projection head; ``forward`` returns unit-norm embeddings.

    With a ``kappa`` head (vMF-κ), ``forward(x, with_kappa=True)`` also returns the per-sample
    concentration kappa = softplus(kappa_head(h)) (N,), computed from the same backbone features h.
    Without one, ``with_kappa=True`` returns ``(z, None)``. ``with_features=True`` returns
    ``(z, kappa, h)``: the pooled backbone features too (the online probe's input).
    """

    def __init__(
        self, backbone: nn.Module, head: nn.Module, kappa: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.backbone, self.head, self.kappa_head = backbone, head, kappa

    def forward(
        self, x: torch.Tensor, with_kappa: bool = False, with_features: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor | None, ...]:
        h = self.backbone(x)
        z = F.normalize(self.head(h), dim=1)
        if not (with_kappa or with_features):
            return z
        kappa = None if self.kappa_head is None else F.softplus(self.kappa_head(h).squeeze(1))
        return (z, kappa, h) if with_features else (z, kappa)


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


class MoCo(nn.Module):
    """Query encoder, momentum key encoder and the key computation of MoCo v2 (Eq. 2 of [0]).

    [0] He et al., Momentum Contrast for Unsupervised Visual Representation Learning, CVPR 2020,
        https://arxiv.org/abs/1911.05722; v2: Chen et al., https://arxiv.org/abs/2003.04297.
    Implementation based on https://github.com/facebookresearch/moco/blob/b8ae0d9/moco/builder.py.
    [1] facebookresearch/moco, branch colab-notebook, ``colab/moco_cifar10_demo.ipynb`` at f736491,
        ``ModelMoCo.forward``.

    The queue and the loss live outside (``pretrain.model.queue``, ``pretrain.losses``), so that
    negative strategies and losses can be swapped without touching this module. As moco's builder
    fixes m, K and T in ``__init__``, the run's constants are set here once.

    Args:
        encoder: the query encoder; the key encoder is a deep copy with ``requires_grad=False``.
        momentum: m of the key encoder's update θ_k ← m·θ_k + (1−m)·θ_q, before the key forward.
        shuffle_keys: shuffle the key batch before the key encoder and unshuffle after (shuffle-BN).
            Across ranks under DDP; on one device only meaningful with split BatchNorm, since plain
            BN is invariant to the order of the batch.
        symmetric: both views through the query encoder as one (2N) batch (the papers' multiview
            layout, ``loss.symmetric``); ``Embeddings.q2`` holds view 2's queries.
        symmetric_keys: each view is query and key in turn (``moco.symmetric_keys``, the MoCo
            CIFAR-10 demo's ``--symmetric`` [1]): view 2 through the query encoder too, in its
            own forward (BatchNorm statistics per view, as the demo's two calls), and after the
            one momentum update view 1 through the key encoder too, each key batch shuffled on
            its own; ``Embeddings.q2`` and ``Embeddings.k1`` hold them.
        bn_splits: the BatchNorm splits the paired batch is laid out for (:func:`pair_views`).
        channels_last: the views enter the encoders in channels-last memory layout.
        keep_features: return view 1's pooled backbone features (the online probe's input).

    Under autocast (``train.amp``) the key encoder's convolution and linear weights are cast to the
    autocast dtype once per key forward, by one multi-tensor copy into a low-precision copy of
    them (:func:`cast_tree`), instead of by autocast at every layer (about 22 casts per forward
    for a ResNet-18 with its head): the same rounding (round to nearest even), so the same keys
    bit for bit. ``cast_keys = False`` turns that off (``train.compile``: inductor fuses the casts
    itself, and a compiled module must be called as compiled).
    """

    def __init__(
        self,
        encoder: Encoder,
        *,
        momentum: float = 0.999,
        shuffle_keys: bool = False,
        symmetric: bool = False,
        symmetric_keys: bool = False,
        bn_splits: int = 1,
        channels_last: bool = False,
        keep_features: bool = False,
    ) -> None:
        super().__init__()
        if symmetric and symmetric_keys:
            raise ValueError("symmetric (multiview layout) and symmetric_keys exclude each other")
        self.encoder_q = encoder
        self.encoder_k = copy.deepcopy(encoder)
        self.encoder_k.requires_grad_(False)
        self.momentum, self.shuffle_keys, self.symmetric = momentum, shuffle_keys, symmetric
        self.symmetric_keys = symmetric_keys
        self.bn_splits, self.channels_last = bn_splits, channels_last
        self.keep_features = keep_features
        self.ddp: tuple[nn.Module, ...] = ()  # the query encoder's DDP wrapper, once wrapped
        self._params: tuple[list[nn.Parameter], list[nn.Parameter]] | None = None
        self.cast_keys = True
        self._key_cast: KeyCast | None = None  # out of the module tree: not in state_dict

    def wrap_for_ddp(self) -> None:
        """Under DDP (called once by setup): gradients of the query encoder averaged over ranks
        per parameter (an exact resume at 3+ ranks); its BatchNorm stays local. The wrapper is
        kept out of the module tree, so state dicts stay unprefixed."""
        ddp = nn.parallel.DistributedDataParallel(self.encoder_q)
        ddp.register_comm_hook(None, dist.allreduce_per_parameter)
        self.ddp = (ddp,)

    @property
    def query_encoder(self) -> nn.Module:
        """The query encoder as the step calls it: its DDP wrapper once wrapped."""
        return self.ddp[0] if self.ddp else self.encoder_q

    @torch.no_grad()
    def momentum_update(self, m: float | None = None) -> None:
        """θ_k ← m·θ_k + (1−m)·θ_q over parameters only (key BN buffers stay its own); m is the
        constructor's ``momentum`` unless given. One multi-tensor op (``_foreach_lerp_``, which
        computes θ_k + (1−m)·(θ_q − θ_k): moco's ``θ_k·m + θ_q·(1−m)`` within rounding) over
        the parameter lists of :meth:`parameter_lists`."""
        m = self.momentum if m is None else m
        k_params, q_params = self.parameter_lists()
        torch._foreach_lerp_(k_params, q_params, 1.0 - m)

    def parameter_lists(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """(key, query) encoders' parameters, listed once and kept: walking the module tree costs
        ~1,500 Python calls a step for a ResNet-18 (benchmarks/host_overhead.py). Listed again
        after ``.to()``/``.cuda()``/``.double()`` and ``load_state_dict`` (which may put new
        parameter objects in the tree)."""
        if self._params is None:
            k, q = list(self.encoder_k.parameters()), list(self.encoder_q.parameters())
            if len(k) != len(q):
                raise ValueError(f"key encoder has {len(k)} parameters, query encoder {len(q)}")
            self._params = (k, q)
        return self._params

    def _apply(self, fn: Callable, recurse: bool = True) -> MoCo:  # .to(), .cuda(), .double()
        self._params, self._key_cast = None, None
        return super()._apply(fn, recurse)

    def load_state_dict(self, *args: object, **kwargs: object) -> object:  # assign=True: new ones
        self._params, self._key_cast = None, None
        return super().load_state_dict(*args, **kwargs)

    def key_encoder(self, x: torch.Tensor) -> nn.Module:
        """The key encoder to call on ``x``: under autocast to a lower precision (and
        :attr:`cast_keys`), :attr:`encoder_k` with its convolution and linear weights in that
        dtype, refreshed from its float weights by one ``_foreach_copy_`` (so always the current
        weights, whatever wrote them); else :attr:`encoder_k` itself."""
        device = x.device.type
        if not (self.cast_keys and torch.is_autocast_enabled(device)):
            return self.encoder_k
        dtype = torch.get_autocast_dtype(device)
        cast = self._key_cast
        if cast is None or cast.dtype != dtype:
            cast = self._key_cast = KeyCast(*cast_tree(self.encoder_k, dtype), dtype)
        if not cast.low:  # a float64 key encoder: nothing autocast would cast
            return self.encoder_k
        torch._foreach_copy_(cast.low, cast.src)
        return cast.module

    @torch.no_grad()
    def keys(
        self, x: torch.Tensor, with_kappa: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor | None]:
        """Momentum update, then k = normalize(encoder_k(x)) with shuffle-BN: (N, D) (and the
        keys' kappa (N,) with ``with_kappa``, None without a kappa head)."""
        self.momentum_update()
        return self.encode_keys(x, with_kappa)

    def embed(self, batch: Batch) -> Embeddings:
        """The embeddings of one batch, in the order of Algorithm 1 of [0]: queries (with
        gradient), the momentum update, then the keys through shuffle-BN. ``batch.x1`` goes
        through the query encoder, ``batch.x2`` through the key encoder, and ``batch.support``
        ((N * V, 3, S, S) extra views, FNC's support set) through the updated key encoder, as
        (N, V, D). With ``symmetric_keys`` also ``batch.x2`` through the query encoder and
        ``batch.x1`` through the key encoder, after view 2's keys (the demo's order of the
        shuffles' draws)."""
        x1, x2 = batch.x1, batch.x2
        # stage 2 of the augmentation hands channels-last views: a no-op then, a copy without it
        layout = torch.channels_last if self.channels_last else torch.contiguous_format
        x1, x2 = (x.contiguous(memory_format=layout) for x in (x1, x2))
        query, want = self.query_encoder, self.keep_features
        if self.symmetric:  # [view 1; view 2] per BatchNorm split, as rank r forwards under DDP
            z, kappa, *h = query(pair_views(x1, x2, self.bn_splits), True, want)  # (2N, D)
            (q, q2), (kappa_q, kappa_q2) = self.split(z), self.split(kappa)
            features = self.split(h[0])[0] if want else None
        else:
            q, kappa_q, *h = query(x1, True, want)  # queries: NxD; kappa (N,) or None
            q2 = kappa_q2 = None
            if self.symmetric_keys:  # a forward of its own: BatchNorm statistics of view 2 alone
                q2 = query(x2)
            features = h[0] if want else None
        k, kappa_k = self.keys(x2, with_kappa=True)  # momentum update, then keys: NxD
        k1 = self.encode_keys(x1) if self.symmetric_keys else None  # the same key encoder
        support = batch.support
        if support is not None:  # (N * V, D) -> (N, V, D), no gradient
            support = self.encode_keys(support).unflatten(0, (x2.shape[0], -1))
        return Embeddings(
            q=q,
            q2=q2,
            k=k,
            k1=k1,
            kappa_q=kappa_q,
            kappa_q2=kappa_q2,
            kappa_k=kappa_k,
            support=support,
            features=features,
        )

    def split(self, z: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """:func:`split_views` at this module's BatchNorm splits."""
        return split_views(z, self.bn_splits)

    @torch.no_grad()
    def encode_keys(
        self, x: torch.Tensor, with_kappa: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor | None]:
        """k = normalize(encoder_k(x)) with shuffle-BN, no momentum update (FNC's support views
        go through it after :meth:`keys`)."""
        unshuffle = None
        if self.shuffle_keys:
            x, unshuffle = dist.shuffle_batch(x)
        k, kappa = self.key_encoder(x)(x, with_kappa=True)
        if unshuffle is not None:
            k = dist.unshuffle_batch(k, unshuffle)
            kappa = None if kappa is None else dist.unshuffle_batch(kappa, unshuffle)
        return (k, kappa) if with_kappa else k


def build(
    *,
    arch: str,
    width: int,
    cifar_stem: bool,
    dim: int,
    mlp: bool,
    bn_splits: int,
    kappa_hidden: int = 0,
    momentum: float = 0.999,
    symmetric: bool = False,
    symmetric_keys: bool = False,
    channels_last: bool = False,
    keep_features: bool = False,
) -> MoCo:
    """The MoCo module from plain arguments (see :class:`pretrain.config.ModelConfig`);
    ``kappa_hidden`` > 0 adds a kappa head with that hidden width (vMF-κ: 512). The step's
    constants (momentum, symmetric, symmetric_keys, channels_last, keep_features) are
    :class:`MoCo`'s."""
    net = backbone(arch, width, cifar_stem, bn_splits)
    kappa = kappa_head(net.feature_dim, kappa_hidden, bn_splits) if kappa_hidden > 0 else None
    encoder = Encoder(net, projection_head(net.feature_dim, dim, mlp), kappa)
    shuffle = bn_splits > 1 or dist.world_size() > 1
    return MoCo(
        encoder,
        momentum=momentum,
        shuffle_keys=shuffle,
        symmetric=symmetric,
        symmetric_keys=symmetric_keys,
        bn_splits=bn_splits,
        channels_last=channels_last,
        keep_features=keep_features,
    )
