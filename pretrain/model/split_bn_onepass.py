"""Split BatchNorm's training step as two one-pass Triton kernels: one launch forward, one backward.

The ``path="triton_onepass"`` of :class:`pretrain.model.split_bn.SplitBatchNorm` (opt-in; CUDA's
default stays the four-kernel :mod:`pretrain.model.split_bn_triton`, until a GPU measures which is
faster: ``benchmarks/split_bn.py`` times both). It computes what the fused aten path computes (the
module docstring of :mod:`pretrain.model.split_bn`: per split r, the biased-variance normalisation
of the contiguous chunk ``x[r*N/s:(r+1)*N/s]``, running statistics averaged over the splits), with
a fixed 2 kernel launches per layer and step whatever s, layout and dtype, where the four-kernel
path launches 4 and the aten path dispatches 11 ops forward and 14 (bf16: 15) backward
(docs/step_counts.md). One program per (split r, block of channels) reads its M = N/s·H·W values
per channel twice (no split is cut into chunks, so a launch has s x channel blocks programs: 32
for 8 splits of 64 bf16 channels_last channels, a DRAM sector of 16 channels a program):

1. ``split_bn_forward``: pass 1, the mean and sum of squared deviations M2, tile by tile merged
   with Chan et al.'s pairwise update (1979; no E[x²] - E[x]² cancellation); it stores μ_r, the
   biased variance σ_r² = M2/M and σ_r⁻¹ = 1/sqrt(σ_r² + eps) (μ, σ⁻¹ for the backward); pass 2,
   y = (x - μ_r) σ_r⁻¹ w + b. The last of the s programs of a channel block to finish pass 1
   updates ``running_mean`` / ``running_var`` in place (momentum m, unbiased variance
   σ² M/(M-1), averaged over the splits in the order r = 0..s-1);
2. ``split_bn_backward``: pass 1, Σ g and Σ g (x - μ_r); pass 2, ∂x = a (g - Σg/M - x̂ Σ(g x̂)/M)
   with a = w σ_r⁻¹ and x̂ = (x - μ_r) σ_r⁻¹ (Ioffe & Szegedy 2015, Alg. 1 differentiated); the
   last of a channel block's s programs writes ∂w = Σ_r Σ g x̂ and ∂b = Σ_r Σ g (summed in the
   order r = 0..s-1: deterministic).

"The last program": each program stores its split's values, then increments its channel block's
counter (an int32 of the layer's ``triton_counters`` buffer, zero between launches) with one
acquire-release atomic; the program that reads s - 1 sums the s splits' values and sets the counter
back to 0. No program waits for another, so any launch order (and the interpreter's one program
after another) is correct.

A layer's input is read as (s, N/s, C, H·W) with its strides, so NCHW and channels_last are both
views (other strides are made contiguous first). Accumulation is float32 for float32/bf16/fp16
inputs (as cuDNN) and float64 for float64; floats reach the kernels in a float64 tensor (a Python
float argument would be rounded to float32). Each kernel is registered as an op of the
``negmine`` library (``torch.ops.negmine.*``, with fake implementations for tracing), so the op
counter of the tests and the profiler see one op per launch. With ``TRITON_INTERPRET=1`` set
before triton is imported the same kernels run on CPU tensors (the tests; slowly). Imports triton:
import this lazily.
"""

# ruff: noqa: ANN001, ANN202  (Triton kernels: arguments are typed by the launch, not annotations)
from __future__ import annotations

from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from pretrain.runtime.triton_env import triton_interpreted

INTERPRET = triton_interpreted()  # TRITON_INTERPRET as triton read it, imported above
PROGRAMS = 1 if INTERPRET else 512  # programs per launch to aim at (an H200 has 132 SMs)
TILE = 1 << 16 if INTERPRET else 4096  # values per tile, BLOCK_M x BLOCK_C (interpreted: large)
BLOCK_C_MAX = 1024 if INTERPRET else 64  # channels per program (interpreted: all in one)
SECTOR = 32  # bytes of a DRAM sector: the least contiguous run of channels (channels_last) to read


@triton.jit
def _offsets(m, c, P, sN, sC, sP):
    n = m // P
    return n.to(tl.int64)[:, None] * sN + ((m - n * P) * sP)[:, None] + (c * sC)[None, :]


@triton.jit
def _last(COUNT, pc, S):
    """Whether this program is the last of its channel block's S to get here (after its stores,
    which the acquire-release increment publishes to that last program)."""
    tl.debug_barrier()  # every thread's stores precede the increment
    return tl.atomic_add(COUNT + pc, 1, sem="acq_rel") == S - 1


@triton.jit
def _split_sum(PART, c, cmask, S, C, ACC: tl.constexpr, BLOCK_C: tl.constexpr):
    """Σ_r PART[r, c] over the S splits, in the order r = 0..S-1 (read past the L1 cache: other
    programs wrote them in this launch)."""
    total = tl.zeros([BLOCK_C], ACC)
    for r in range(0, S):
        total += tl.load(PART + r * C + c, mask=cmask, other=0.0, cache_modifier=".cg")
    return total


@triton.jit
def _split_bn_forward_kernel(
    X,
    Y,
    W,
    B,
    RM,
    RV,
    MEAN,
    VAR,
    INVSTD,
    COUNT,
    PARAMS,
    S,
    M,
    P,
    C,
    sS,
    sN,
    sC,
    sP,
    ACC: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    s, pc = tl.program_id(0), tl.program_id(1)
    c = pc * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = c < C
    base = X + s.to(tl.int64) * sS
    mean = tl.zeros([BLOCK_C], ACC)
    m2 = tl.zeros([BLOCK_C], ACC)
    before = tl.zeros([BLOCK_C], ACC)  # values merged so far
    for m0 in range(0, M, BLOCK_M):  # pass 1: Chan's pairwise merge of each tile's (mean, M2)
        m = m0 + tl.arange(0, BLOCK_M)
        mask = (m < M)[:, None] & cmask[None, :]
        x = tl.load(base + _offsets(m, c, P, sN, sC, sP), mask=mask, other=0.0).to(ACC)
        cnt = tl.minimum(M - m0, BLOCK_M).to(ACC)
        tmean = tl.sum(x, 0) / cnt
        d = tl.where(mask, x - tmean[None, :], 0.0)
        tot = before + cnt
        delta = tmean - mean
        mean += delta * (cnt / tot)
        m2 += tl.sum(d * d, 0) + delta * delta * (before * cnt / tot)
        before = tot
    var = m2 / M
    invstd = 1.0 / tl.sqrt(var + tl.load(PARAMS).to(ACC))
    tl.store(MEAN + s * C + c, mean, mask=cmask)
    tl.store(VAR + s * C + c, var, mask=cmask)
    tl.store(INVSTD + s * C + c, invstd, mask=cmask)
    if _last(COUNT, pc, S):  # running <- running + m (mean_r(stat_r) - running), var unbiased
        avg_mean = _split_sum(MEAN, c, cmask, S, C, ACC, BLOCK_C) / S
        avg_var = _split_sum(VAR, c, cmask, S, C, ACC, BLOCK_C) / S
        momentum = tl.load(PARAMS + 1).to(ACC)
        unbias = M.to(ACC) / (M - 1).to(ACC)
        rm = tl.load(RM + c, mask=cmask, other=0.0)
        rv = tl.load(RV + c, mask=cmask, other=0.0)
        new_m = rm.to(ACC) + momentum * (avg_mean - rm.to(ACC))
        new_v = rv.to(ACC) + momentum * (avg_var * unbias - rv.to(ACC))
        tl.store(RM + c, new_m.to(rm.dtype), mask=cmask)
        tl.store(RV + c, new_v.to(rv.dtype), mask=cmask)
        tl.store(COUNT + pc, 0)
    scale = tl.load(W + c, mask=cmask, other=0.0).to(ACC) * invstd
    shift = tl.load(B + c, mask=cmask, other=0.0).to(ACC) - mean * scale
    out = Y + s.to(tl.int64) * sS
    for m0 in range(0, M, BLOCK_M):  # pass 2: y = x a + (b - a μ)
        m = m0 + tl.arange(0, BLOCK_M)
        mask = (m < M)[:, None] & cmask[None, :]
        off = _offsets(m, c, P, sN, sC, sP)
        x = tl.load(base + off, mask=mask, other=0.0).to(ACC)
        y = x * scale[None, :] + shift[None, :]
        tl.store(out + off, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _split_bn_backward_kernel(
    GR,
    X,
    DX,
    MEAN,
    INVSTD,
    W,
    DW,
    DB,
    PSG,
    PSGX,
    COUNT,
    S,
    M,
    P,
    C,
    sS,
    sN,
    sC,
    sP,
    gS,
    gN,
    gC,
    gP,
    ACC: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    s, pc = tl.program_id(0), tl.program_id(1)
    c = pc * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = c < C
    mean = tl.load(MEAN + s * C + c, mask=cmask, other=0.0)
    invstd = tl.load(INVSTD + s * C + c, mask=cmask, other=0.0)
    xb = X + s.to(tl.int64) * sS
    gb = GR + s.to(tl.int64) * gS
    sg = tl.zeros([BLOCK_C], ACC)
    sgx = tl.zeros([BLOCK_C], ACC)
    for m0 in range(0, M, BLOCK_M):  # pass 1: Σ g and Σ g (x - μ)
        m = m0 + tl.arange(0, BLOCK_M)
        mask = (m < M)[:, None] & cmask[None, :]
        x = tl.load(xb + _offsets(m, c, P, sN, sC, sP), mask=mask, other=0.0)
        gr = tl.load(gb + _offsets(m, c, P, gN, gC, gP), mask=mask, other=0.0).to(ACC)
        sg += tl.sum(gr, 0)
        sgx += tl.sum(tl.where(mask, gr * (x.to(ACC) - mean[None, :]), 0.0), 0)
    tl.store(PSG + s * C + c, sg, mask=cmask)
    tl.store(PSGX + s * C + c, sgx * invstd, mask=cmask)  # Σ g x̂
    if _last(COUNT, pc, S):  # ∂w = Σ_r Σ g x̂_r, ∂b = Σ_r Σ g
        dw = _split_sum(PSGX, c, cmask, S, C, ACC, BLOCK_C)
        db = _split_sum(PSG, c, cmask, S, C, ACC, BLOCK_C)
        tl.store(DW + c, dw.to(DW.dtype.element_ty), mask=cmask)
        tl.store(DB + c, db.to(DB.dtype.element_ty), mask=cmask)
        tl.store(COUNT + pc, 0)
    a = tl.load(W + c, mask=cmask, other=0.0).to(ACC) * invstd
    c1 = a * invstd * invstd * sgx / M  # a σ⁻¹ Σ(g x̂) / M
    c0 = c1 * mean - a * sg / M
    for m0 in range(0, M, BLOCK_M):  # pass 2: ∂x = a g - c₁ x + c₀
        m = m0 + tl.arange(0, BLOCK_M)
        mask = (m < M)[:, None] & cmask[None, :]
        off = _offsets(m, c, P, sN, sC, sP)
        x = tl.load(xb + off, mask=mask, other=0.0).to(ACC)
        gr = tl.load(gb + _offsets(m, c, P, gN, gC, gP), mask=mask, other=0.0)
        dx = a[None, :] * gr.to(ACC) - c1[None, :] * x + c0[None, :]
        tl.store(DX + s.to(tl.int64) * sS + off, dx.to(DX.dtype.element_ty), mask=mask)


def _layout(x: torch.Tensor, splits: int) -> tuple[torch.Tensor, tuple[int, int, int, int]]:
    """``x`` (N, C, H, W) as (s, N/s, C, H·W) strides, made contiguous if H, W do not merge."""
    if x.stride(2) != x.shape[3] * x.stride(3) and x.shape[2] > 1:
        x = x.contiguous()
    n, sn, sc, sp = x.shape[0] // splits, x.stride(0), x.stride(1), x.stride(3)
    return x, (n * sn, sn, sc, sp)


def _block_c(c: int, splits: int, contiguous_channels: bool, itemsize: int) -> int:
    """Channels per program: the most (<= BLOCK_C_MAX) that still give ``splits`` x blocks >=
    PROGRAMS programs, but no fewer than a DRAM sector's worth where channels are contiguous."""
    block_c = min(triton.next_power_of_2(c), BLOCK_C_MAX)
    least = min(block_c, max(1, SECTOR // itemsize)) if contiguous_channels else 1
    while block_c > least and splits * triton.cdiv(c, block_c) < PROGRAMS:
        block_c //= 2
    return block_c


class Plan(NamedTuple):
    """One launch over ``x`` read as (s, N/s, C, H·W): the grid (s, channel blocks), the size
    and stride arguments (M, P, C; sS, sN, sC, sP) and the constexprs."""

    x: torch.Tensor
    grid: tuple[int, int]
    sizes: tuple[int, int, int]
    strides: tuple[int, int, int, int]
    meta: dict


def _plan(x: torch.Tensor, splits: int) -> Plan:
    x, strides = _layout(x, splits)
    c = x.shape[1]
    m = x.numel() // c // splits
    block_c = _block_c(c, splits, strides[2] == 1 and c > 1, x.element_size())
    block_m = max(2, min(TILE // block_c, triton.next_power_of_2(m)))
    acc = tl.float64 if x.dtype == torch.float64 else tl.float32
    meta = {"ACC": acc, "BLOCK_M": block_m, "BLOCK_C": block_c}
    sizes = (m, x.shape[2] * x.shape[3], c)
    return Plan(x, (splits, triton.cdiv(c, block_c)), sizes, strides, meta)


def _stat_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    counters: torch.Tensor,
    params: torch.Tensor,
    splits: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    p = _plan(x, splits)
    y = torch.empty_like(p.x)  # the input's layout: the same strides as x
    mean = x.new_empty((splits, x.shape[1]), dtype=_stat_dtype(x))
    var, invstd = torch.empty_like(mean), torch.empty_like(mean)
    args = (p.x, y, weight, bias, running_mean, running_var, mean, var, invstd, counters, params)
    _split_bn_forward_kernel[p.grid](*args, splits, *p.sizes, *p.strides, **p.meta)
    return y, mean, invstd


def _forward_fake(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    counters: torch.Tensor,
    params: torch.Tensor,
    splits: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y = torch.empty_like(_layout(x, splits)[0])
    mean = x.new_empty((splits, x.shape[1]), dtype=_stat_dtype(x))
    return y, mean, torch.empty_like(mean)


def _backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    mean: torch.Tensor,
    invstd: torch.Tensor,
    weight: torch.Tensor,
    counters: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    splits = mean.shape[0]
    p, g = _plan(x, splits), _layout(grad, splits)
    dx = torch.empty_like(p.x)
    dw, db = torch.empty_like(weight), torch.empty_like(weight)
    psg, psgx = torch.empty_like(mean), torch.empty_like(mean)
    args = (g[0], p.x, dx, mean, invstd, weight, dw, db, psg, psgx, counters, splits)
    _split_bn_backward_kernel[p.grid](*args, *p.sizes, *p.strides, *g[1], **p.meta)
    return dx, dw, db


def _backward_fake(
    grad: torch.Tensor,
    x: torch.Tensor,
    mean: torch.Tensor,
    invstd: torch.Tensor,
    weight: torch.Tensor,
    counters: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dx = torch.empty_like(_layout(x, mean.shape[0])[0])
    return dx, torch.empty_like(weight), torch.empty_like(weight)


LIB = torch.library.Library("negmine", "FRAGMENT")
SCHEMAS = {  # name: (schema, implementation)
    "split_bn_forward": (
        "(Tensor x, Tensor weight, Tensor bias, Tensor(a!) running_mean, Tensor(b!) running_var,"
        " Tensor(c!) counters, Tensor params, int splits) -> (Tensor, Tensor, Tensor)",
        _forward,
    ),
    "split_bn_backward": (
        "(Tensor grad, Tensor x, Tensor mean, Tensor invstd, Tensor weight, Tensor(a!) counters)"
        " -> (Tensor, Tensor, Tensor)",
        _backward,
    ),
}
FAKES = {"split_bn_forward": _forward_fake, "split_bn_backward": _backward_fake}  # for tracing
for _name, (_schema, _fn) in SCHEMAS.items():
    LIB.define(_name + _schema)
    LIB.impl(_name, _fn, "CompositeExplicitAutograd")
    torch.library.register_fake("negmine::" + _name, FAKES[_name], lib=LIB)
ops = torch.ops.negmine


class OnePassSplitBatchNorm(torch.autograd.Function):
    """Split BN's training forward (updating the running statistics in place) and its backward,
    one kernel launch each; returns y."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        running_mean: torch.Tensor,
        running_var: torch.Tensor,
        counters: torch.Tensor,
        splits: int,
        params: torch.Tensor,
    ) -> torch.Tensor:
        y, mean, invstd = ops.split_bn_forward(
            x, weight, bias, running_mean, running_var, counters, params, splits
        )
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.counters = counters  # not saved: each launch changes it (and leaves it at zero)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight, mean, invstd = ctx.saved_tensors
        dx, dw, db = ops.split_bn_backward(grad, x, mean, invstd, weight, ctx.counters)
        return dx, dw, db, None, None, None, None, None
