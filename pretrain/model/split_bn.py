"""Split BatchNorm: training statistics per sub-batch of ``N / num_splits``, on two paths.

Emulates the per-GPU BN of multi-GPU MoCo on one device (the official CIFAR colab's
``SplitBatchNorm``, facebookresearch/moco branch colab-notebook). Both paths compute, for split r
(the contiguous chunk ``x[r*N/s:(r+1)*N/s]``), ``y = (x - mean_r) / sqrt(var_r + eps) * w + b``
with the biased variance, and update ``running_mean`` / ``running_var`` as nn.BatchNorm2d does
per split (momentum m, unbiased variance), averaged over the splits:
``running <- (1 - m) running + m mean_r(stat_r)``.

- per split (the CPU's): one ``batch_norm`` per chunk and one ``cat``; its op count grows with s.
  On one CPU thread it beats the fused path (benchmarks/split_bn.py, benchmarks/RESULTS.md).
- fused (aten ops): the statistics of every split from one reduction over the (s, N/s, C, H, W) view
  (a view in NCHW and channels_last), one normalisation (``addcmul``), and a hand-written backward
  (:class:`SplitBatchNormFunction`) of a fixed handful of ops; the op count does not depend on s.
  Statistics and the affine coefficients are float32 for bf16/fp16 inputs (as cuDNN keeps them);
  the output has the input's dtype and layout.

- triton (CUDA's default): the same arithmetic as fused in four Triton kernels, two launches
  forward and two backward (:mod:`pretrain.model.split_bn_triton`), where fused dispatches 11 aten
  ops forward and 14 backward (15 in bf16: the gradient's float32 cast); under ``torch.compile`` the
  fused path is traced instead (inductor fuses it itself).
  With :attr:`SplitBatchNorm.act` (FusedBasicBlock's layers) the triton kernels also do the
  ReLU and the block's shortcut sum; every other path runs them as BasicBlock's own ops.
- triton_onepass (opt-in): the same arithmetic in two one-pass Triton kernels, one launch forward
  and one backward (:mod:`pretrain.model.split_bn_onepass`): half the BN launches, but no split
  cut into chunks (fewer programs a launch), and the ReLUs and sums as their own ops;
  ``benchmarks/split_bn.py`` times it beside triton. Under ``torch.compile`` it becomes fused
  too.

``SplitBatchNorm.path``: None chooses by the input's device (triton on CUDA when triton imports,
else fused; per split elsewhere); "per_split", "fused", "triton" or "triton_onepass" force one
(``model.split_bn`` in the config; tests and op counting). Eval mode is plain BN on every path.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from pretrain.runtime.triton_env import triton_interpreted

PATHS = ("per_split", "fused", "triton", "triton_onepass")
TRITON_PATHS = ("triton", "triton_onepass")  # need CUDA (or TRITON_INTERPRET=1) and a momentum
HAS_TRITON = importlib.util.find_spec("triton") is not None  # comes with torch's CUDA wheels
DIMS = (1, 3, 4)  # the reduced axes of the (s, N/s, C, H, W) view: per (split, channel)


def split_stats(xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(biased var, mean) per split and channel of ``xs`` (s, n, C, H, W): float32 (s, 1, C, 1, 1)
    (float64 for float64 input); one Welford reduction for float32/64, two for bf16/fp16 (their
    statistics are accumulated and returned in float32, not rounded to the input's dtype)."""
    if xs.dtype in (torch.float32, torch.float64):
        return torch.var_mean(xs, DIMS, correction=0, keepdim=True)
    var = xs.new_empty((xs.shape[0], 1, xs.shape[2], 1, 1), dtype=torch.float32)
    torch.var(xs, DIMS, correction=0, keepdim=True, out=var)  # float32 out: float32 accumulation
    return var, torch.mean(xs, DIMS, keepdim=True, dtype=torch.float32)


class SplitBatchNormFunction(torch.autograd.Function):
    """Fused split-BN training forward and its backward; returns (y, mean, biased var).

    Backward of BN per split (Ioffe & Szegedy 2015, Alg. 1 differentiated), with
    x̂ = (x - μ_r) σ_r⁻¹, a = w σ_r⁻¹ and M = N/s·H·W elements per (split, channel):
    ∂b = Σ_r Σ g, ∂w = Σ_r Σ g x̂, ∂x = a (g - Σg/M - x̂ Σ(g x̂)/M) = a g - c₁ x + c₀ with
    c₁ = a σ_r⁻¹ Σ(g x̂)/M and c₀ = c₁ μ_r - a Σg/M (the sums per split and channel).
    """

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, splits: int, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        xs = x.unflatten(0, (splits, -1))  # (s, n, C, H, W): a view in either layout
        var, mean = split_stats(xs)  # (s, 1, C, 1, 1) each
        invstd = var.add(eps).rsqrt_()
        scale = invstd * weight.view(-1, 1, 1)  # a = w / sqrt(var + eps)
        shift = torch.addcmul(bias.view(-1, 1, 1), mean, scale, value=-1)  # b - a mean
        y = torch.empty_like(x)  # the input's dtype and layout; not a view (relu_ follows)
        torch.addcmul(shift, xs, scale, out=y.unflatten(0, (splits, -1)))
        ctx.save_for_backward(xs, mean, invstd, scale)
        ctx.mark_non_differentiable(mean, var)
        ctx.set_materialize_grads(False)  # no zero gradients built for mean and var
        return y, mean, var

    @staticmethod
    @once_differentiable  # a second derivative raises instead of being silently wrong
    def backward(
        ctx: Any, grad: torch.Tensor, _mean: Any, _var: Any
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, None, None]:
        if grad is None:  # y unused (grads are not materialised as zeros)
            return None, None, None, None, None
        xs, mean, invstd, scale = ctx.saved_tensors
        g = grad.unflatten(0, (xs.shape[0], -1))
        n = xs[0].numel() // xs.shape[2]  # M: elements per (split, channel)
        acc = torch.float64 if xs.dtype == torch.float64 else torch.float32
        g_sum = g.sum(DIMS, keepdim=True, dtype=acc)  # Σ g
        g_acc = g if g.dtype == acc else g.to(acc)  # g x in float32: bf16 products cancel below
        gx_hat = torch.sum(g_acc * xs, DIMS, keepdim=True, dtype=acc)  # Σ g x
        gx_hat = torch.addcmul(gx_hat, mean, g_sum, value=-1).mul_(invstd)  # Σ g x̂
        c1 = torch.mul(scale, invstd).mul_(gx_hat).mul_(1.0 / n)
        c0 = torch.addcmul(c1 * mean, scale, g_sum, value=-1.0 / n)
        dx = torch.addcmul(c0, xs, c1, value=-1)  # c₀ - c₁ x (float32 for reduced inputs)
        dx = torch.addcmul(dx, g, scale, out=torch.empty_like(xs))  # + a g, input dtype
        return dx.flatten(0, 1), gx_hat.sum(0).flatten(), g_sum.sum(0).flatten(), None, None


class SplitBatchNorm(nn.BatchNorm2d):
    """BatchNorm whose training statistics are computed per sub-batch of ``N / num_splits``.

    Split r is the contiguous chunk ``x[r*N/s:(r+1)*N/s]``, which is what rank r holds under DDP
    (the sampler gives each rank consecutive indices of the global batch, and
    :func:`pretrain.runtime.dist.shuffle_batch` gives rank r the r-th chunk of the shuffled batch):
    one process with s splits computes what an s-rank run computes. The colab groups samples
    r, r+s, r+2s, ... instead; since the batch is shuffled (sampler, shuffle-BN), both groupings
    give splits with the same distribution of statistics. Running statistics are averaged over
    the splits; eval mode is plain BN.

    Args:
        num_features: channels C.
        num_splits: s; the batch must be a multiple of it in training.
        path: one of :data:`PATHS` to force it; None: by device (:meth:`chosen_path`).

    ``act`` (set by the residual blocks that own the layer, :class:`FusedBasicBlock`): the layer
    returns ``relu(BN(x))``, or ``relu(BN(x) + residual)`` given the block's shortcut
    (``forward(x, residual)``), as torchvision's BasicBlock computes after its BatchNorms. On the
    triton path the sum and the ReLU run inside the normalising kernel and their backward inside
    the two backward kernels (:mod:`pretrain.model.split_bn_triton`); every other path runs
    BasicBlock's own ``out += identity`` and in-place ReLU after the normalisation.
    """

    def __init__(self, num_features: int, num_splits: int, path: str | None = None) -> None:
        super().__init__(num_features)
        if path is not None and path not in PATHS:
            raise ValueError(f"split BN path {path!r}: expected one of {PATHS}")
        # The Triton kernels read (eps, momentum) from a float64 tensor on the layer's device (a
        # Python float argument would be rounded to float32): built here and moved by .to(), never
        # in the step, where its host-to-device copy would wait for the GPU. Not in state_dict.
        self.register_buffer("triton_params", self._triton_params(None), persistent=False)
        self.num_splits, self.path = num_splits, path  # path: after triton_params (__setattr__)
        self.act = False

    def _triton_params(self, device: torch.device | None) -> torch.Tensor:
        """[eps, momentum] in float64 (NaN for a cumulative average) on ``device``."""
        momentum = math.nan if self.momentum is None else self.momentum
        return torch.tensor([self.eps, momentum], dtype=torch.float64, device=device)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if "triton_params" not in self.__dict__.get("_buffers", {}):
            return
        if name in ("eps", "momentum"):
            self._buffers["triton_params"] = self._triton_params(self.triton_params.device)
        if name == "path":
            self._counters_follow_path()

    def _counters_follow_path(self) -> None:
        """The one-pass kernels' "last program of the channel block" counts: ``triton_counters``,
        one int32 per channel (at most one per block), zero between launches (each launch sets
        back what it counted); built on the layer's device when ``path`` becomes
        "triton_onepass" (by the constructor or :func:`use_path`, never in the step) and dropped
        when it leaves it. Not in state_dict."""
        if self.path == "triton_onepass" and "triton_counters" not in self._buffers:
            zeros = torch.zeros(
                self.num_features, dtype=torch.int32, device=self.triton_params.device
            )
            self.register_buffer("triton_counters", zeros, persistent=False)
        elif self.path != "triton_onepass" and "triton_counters" in self._buffers:
            del self._buffers["triton_counters"]

    def _apply(self, fn: Any, recurse: bool = True) -> SplitBatchNorm:
        """``nn.Module._apply`` (``.to()``, ``.cuda()``, ``.half()``, ``.to_empty()``, ...), then
        :attr:`triton_params` rebuilt on its new device from the floats: a dtype cast would round
        eps and momentum, ``to_empty`` would leave them unset; so would it the one-pass path's
        counters (zeros)."""
        super()._apply(fn, recurse)
        self._buffers["triton_params"] = self._triton_params(self.triton_params.device)
        if "triton_counters" in self._buffers:
            self._buffers["triton_counters"] = torch.zeros_like(self.triton_counters)
        return self

    def chosen_path(self, x: torch.Tensor) -> str:
        """``path`` if set; else triton on CUDA (fused without triton), per split elsewhere
        (measured faster on a CPU). Under torch.compile, either Triton path becomes fused."""
        if self.path not in (None, *TRITON_PATHS):
            return self.path
        if torch.compiler.is_compiling() and (self.path or x.is_cuda):
            return "fused"  # inductor fuses the aten ops itself; the Triton ops are opaque to it
        if self.path is not None:
            return self.path
        return ("triton" if HAS_TRITON else "fused") if x.is_cuda else "per_split"

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if residual is not None and not self.act:
            raise ValueError("a split BN layer takes a residual only with its ReLU (act=True)")
        if not self.training or self.num_splits == 1:
            return self.after(super().forward(x), residual)
        s = self.num_splits
        if x.shape[0] % s:
            raise ValueError(f"batch of {x.shape[0]} cannot be split into {s} BatchNorm splits")
        path = self.chosen_path(x)
        if path != "per_split" and x.numel() // s // x.shape[1] == 1:  # as BatchNorm2d refuses
            raise ValueError(f"one value per channel in each of the {s} BatchNorm splits")
        if path == "triton":
            self.check_triton(x, path)
            from pretrain.model.split_bn_triton import TritonSplitBatchNorm  # imports triton

            state = (x, self.weight, self.bias, self.running_mean, self.running_var)
            return TritonSplitBatchNorm.apply(*state, s, self.triton_params, residual, self.act)
        return self.after(self.normalize(x, path), residual)

    def after(self, y: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
        """BasicBlock's ops after its BatchNorm, in place on the normalised ``y`` when
        :attr:`act`: ``y += residual`` (given one), then the ReLU."""
        if not self.act:
            return y
        if residual is not None:
            y += residual
        return F.relu(y, inplace=True)

    def normalize(self, x: torch.Tensor, path: str) -> torch.Tensor:
        """The split normalisation of ``x`` on ``path``, other than triton's fused one."""
        if path != "per_split":
            return self.forward_fused(x) if path == "fused" else self.forward_triton(x, path)
        s = self.num_splits
        # one batch_norm per split on its chunk (a view, in the input's layout), then one cat:
        # each split computes exactly what a rank holding that chunk computes with BatchNorm2d.
        # Folding the splits into channels (N/s, s*C, H, W) costs two layout copies per layer:
        # 512 x 64 x 32 x 32, forward + backward, one thread: 812 -> 226 ms (fp32), bf16
        # channels_last 328 -> 113 ms.
        mean = self.running_mean.repeat(s, 1)  # (s, C): each split updates its own row
        var = self.running_var.repeat(s, 1)
        w, b, m, eps = self.weight, self.bias, self.momentum, self.eps
        out = torch.cat(
            [
                F.batch_norm(x_r, mean[r], var[r], w, b, True, m, eps)
                for r, x_r in enumerate(x.chunk(s))
            ]
        )
        self.running_mean.copy_(mean.mean(0))
        self.running_var.copy_(var.mean(0))
        return out

    def forward_fused(self, x: torch.Tensor) -> torch.Tensor:
        """The fused path: a fixed number of ops for any number of splits."""
        y, mean, var = SplitBatchNormFunction.apply(
            x, self.weight, self.bias, self.num_splits, self.eps
        )
        with torch.no_grad():  # mean over splits of each split's BatchNorm2d update
            n = x.numel() // self.num_splits // x.shape[1]
            avg = torch.cat([mean, var], 1).mean(0)  # (2, C, 1, 1): split-mean of mean, var
            running = [self.running_mean, self.running_var]
            torch._foreach_lerp_(
                running, [avg[0].flatten(), avg[1].flatten() * (n / (n - 1))], self.momentum
            )
        return y

    def forward_triton(self, x: torch.Tensor, path: str = "triton") -> torch.Tensor:
        """A Triton path: "triton", four kernel launches per layer and step (forward and
        backward), or "triton_onepass", two; without :attr:`act`'s fused ops."""
        self.check_triton(x, path)
        state = (x, self.weight, self.bias, self.running_mean, self.running_var)
        if path == "triton_onepass":
            from pretrain.model.split_bn_onepass import OnePassSplitBatchNorm  # imports triton

            counters = self.triton_counters
            return OnePassSplitBatchNorm.apply(
                *state, counters, self.num_splits, self.triton_params
            )
        from pretrain.model.split_bn_triton import TritonSplitBatchNorm  # imports triton

        return TritonSplitBatchNorm.apply(*state, self.num_splits, self.triton_params)

    def check_triton(self, x: torch.Tensor, path: str) -> None:
        """Refuse a Triton path where it cannot run (by name, before any kernel)."""
        if not (x.is_cuda or triton_interpreted()):
            raise ValueError(f"split BN path {path!r} needs CUDA tensors (or TRITON_INTERPRET=1)")
        if self.momentum is None:
            raise ValueError(f"split BN path {path!r} needs a momentum (not a cumulative average)")
        if self.triton_params.device != x.device:
            raise ValueError(
                f"split BN path {path!r}: the layer is on {self.triton_params.device}, its input "
                f"on {x.device}; move the module with .to()"
            )


def use_path(module: nn.Module, path: str | None) -> None:
    """Set :attr:`SplitBatchNorm.path` on every split BN in ``module`` (None: by device)."""
    for m in module.modules():
        if isinstance(m, SplitBatchNorm):
            m.path = path
