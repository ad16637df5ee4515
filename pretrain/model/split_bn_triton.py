"""Split BatchNorm's training step as four Triton kernels: two launches forward, two backward.

The CUDA path of :class:`pretrain.model.split_bn.SplitBatchNorm` (``path="triton"``). It computes
what the fused aten path computes (the module docstring of :mod:`pretrain.model.split_bn`: per split
r, the biased-variance normalisation of the contiguous chunk ``x[r*N/s:(r+1)*N/s]``, running
statistics averaged over the splits), with a fixed 4 kernel launches per layer and step whatever s,
layout and dtype, where the aten path dispatches 11 ops forward and 14 (bf16: 15) backward
(docs/step_counts.md):

1. ``split_bn_stats``: per (split, channel, chunk of the split's N/s·H·W values) the chunk's mean
   and sum of squared deviations, tile by tile merged with Chan et al.'s pairwise update (1979;
   no E[x²] - E[x]² cancellation);
2. ``split_bn_normalize``: each program merges its split's chunks at once (mean = Σ n_g mean_g / M,
   M2 = Σ M2_g + Σ n_g (mean_g - mean)²),
   y = (x - μ) σ⁻¹ w + b; the first chunk's programs store (μ, σ⁻¹) for the backward, and those of
   split 0 update ``running_mean`` / ``running_var`` (momentum m, unbiased variance, averaged over
   the splits) in place;
3. ``split_bn_grad_stats``: per (split, channel, chunk) Σ g and Σ g (x - μ);
4. ``split_bn_grad_input``: ∂x = a (g - Σg/M - x̂ Σ(g x̂)/M) with a = w σ⁻¹, x̂ = (x - μ) σ⁻¹ and
   M = N/s·H·W (Ioffe & Szegedy 2015, Alg. 1 differentiated); the programs of split 0's first
   chunk also write ∂w = Σ_r Σ g x̂ and ∂b = Σ_r Σ g.

A layer's input is read as (s, N/s, C, H·W) with its strides, so NCHW and channels_last are both
views (other strides are made contiguous first). Accumulation is float32 for float32/bf16/fp16
inputs (as cuDNN) and float64 for float64; floats reach the kernels in a float64 tensor (a Python
float argument would be rounded to float32). Each kernel is registered as an op of the
``negmine`` library (``torch.ops.negmine.*``), so the op counter of the tests and the profiler
see one op per launch. With ``TRITON_INTERPRET=1`` set before triton is imported the same kernels
run on CPU tensors (the tests; slowly). Imports triton: import this lazily.
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
PROGRAMS = 1024  # programs per launch to aim at (an H100 has 132 SMs)
TILE = 1 << 16 if INTERPRET else 4096  # values per tile, BLOCK_M x BLOCK_C (interpreted: large)
BLOCK_C_MAX = 1024 if INTERPRET else 64  # channels per program (interpreted: all in one)
MAX_CHUNKS = 64  # chunks per split: a consumer program merges them all at once (registers)
CHUNKS: int | None = None  # chunks per split; None: from PROGRAMS (1 interpreted). Tests set it


@triton.jit
def _merged(PMEAN, PM2, s, c, cmask, G, CHUNK, M, C, ACC: tl.constexpr, BLOCK_G: tl.constexpr):
    """(mean, biased var) of split s for channels c from its G chunks' (mean, M2), all chunks at
    once: mean = Σ n_g mean_g / M, M2 = Σ M2_g + Σ n_g (mean_g - mean)² (exact; no cancellation)."""
    g = tl.arange(0, BLOCK_G)
    gmask = g < G
    cnt = tl.where(gmask, tl.minimum(CHUNK, M - g * CHUNK), 0).to(ACC)
    off = (s * G + g).to(tl.int64)[:, None] * C + c[None, :]
    mask = gmask[:, None] & cmask[None, :]
    pm = tl.load(PMEAN + off, mask=mask, other=0.0)
    pv = tl.load(PM2 + off, mask=mask, other=0.0)
    mean = tl.sum(pm * cnt[:, None], 0) / M
    d = tl.where(mask, pm - mean[None, :], 0.0)
    return mean, (tl.sum(pv, 0) + tl.sum(cnt[:, None] * d * d, 0)) / M


@triton.jit
def _chunk_sums(PART, s, c, cmask, G, C, BLOCK_G: tl.constexpr):
    """Σ over split s's G chunks of the per-chunk sums in PART (S, G, C), for channels c."""
    g = tl.arange(0, BLOCK_G)
    off = (s * G + g).to(tl.int64)[:, None] * C + c[None, :]
    return tl.sum(tl.load(PART + off, mask=(g < G)[:, None] & cmask[None, :], other=0.0), 0)


@triton.jit
def _through_relu(gr, Y, off, mask, ACT: tl.constexpr):
    """The gradient through a fused ReLU: zero where its output y is not positive (what
    ``threshold_backward(grad, y, 0)`` computes for ``torch.relu``)."""
    if ACT:
        gr = tl.where(tl.load(Y + off, mask=mask, other=0.0) > 0, gr, 0.0)
    return gr


@triton.jit
def _offsets(m, c, P, sN, sC, sP):
    n = m // P
    return n.to(tl.int64)[:, None] * sN + ((m - n * P) * sP)[:, None] + (c * sC)[None, :]


# fmt: off
@triton.jit
def _stats_kernel(
    X, PMEAN, PM2, M, P, C, CHUNK, sS, sN, sC, sP,
    ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr,
):
    # fmt: on
    s, pc, g = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    c = pc * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = c < C
    start = g * CHUNK
    end = tl.minimum(start + CHUNK, M)
    base = X + s.to(tl.int64) * sS
    mean = tl.zeros([BLOCK_C], ACC)
    m2 = tl.zeros([BLOCK_C], ACC)
    for m0 in range(start, end, BLOCK_M):
        m = m0 + tl.arange(0, BLOCK_M)
        mask = (m < end)[:, None] & cmask[None, :]
        x = tl.load(base + _offsets(m, c, P, sN, sC, sP), mask=mask, other=0.0).to(ACC)
        before = (m0 - start).to(ACC)
        cnt = tl.minimum(end - m0, BLOCK_M).to(ACC)
        tmean = tl.sum(x, 0) / cnt
        d = tl.where(mask, x - tmean[None, :], 0.0)
        tot = before + cnt
        delta = tmean - mean
        mean += delta * (cnt / tot)
        m2 += tl.sum(d * d, 0) + delta * delta * (before * cnt / tot)
    row = (s * tl.num_programs(2) + g).to(tl.int64) * C
    tl.store(PMEAN + row + c, mean, mask=cmask)
    tl.store(PM2 + row + c, m2, mask=cmask)


# fmt: off
@triton.jit
def _normalize_kernel(
    X, Y, Z, PMEAN, PM2, W, B, RM, RV, MEAN, INVSTD, PARAMS, S, M, P, C, CHUNK, sS, sN, sC, sP,
    zS, zN, zC, zP,
    ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_G: tl.constexpr,
    ACT: tl.constexpr, RES: tl.constexpr,
):
    # fmt: on
    s, pc, g = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    G = tl.num_programs(2)
    c = pc * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = c < C
    eps = tl.load(PARAMS).to(ACC)
    mean, var = _merged(PMEAN, PM2, s, c, cmask, G, CHUNK, M, C, ACC, BLOCK_G)
    invstd = 1.0 / tl.sqrt(var + eps)
    scale = tl.load(W + c, mask=cmask, other=0.0).to(ACC) * invstd
    shift = tl.load(B + c, mask=cmask, other=0.0).to(ACC) - mean * scale
    if g == 0:
        tl.store(MEAN + s * C + c, mean, mask=cmask)
        tl.store(INVSTD + s * C + c, invstd, mask=cmask)
        if s == 0:  # running <- running + m (mean_r(stat_r) - running), var unbiased
            avg_mean = tl.zeros([BLOCK_C], ACC)
            avg_var = tl.zeros([BLOCK_C], ACC)
            for r in range(0, S):
                mr, vr = _merged(PMEAN, PM2, r, c, cmask, G, CHUNK, M, C, ACC, BLOCK_G)
                avg_mean += mr
                avg_var += vr
            momentum = tl.load(PARAMS + 1).to(ACC)
            unbias = M.to(ACC) / (M - 1).to(ACC)
            rm = tl.load(RM + c, mask=cmask, other=0.0)
            rv = tl.load(RV + c, mask=cmask, other=0.0)
            new_m = rm.to(ACC) + momentum * (avg_mean / S - rm.to(ACC))
            new_v = rv.to(ACC) + momentum * (avg_var / S * unbias - rv.to(ACC))
            tl.store(RM + c, new_m.to(rm.dtype), mask=cmask)
            tl.store(RV + c, new_v.to(rv.dtype), mask=cmask)
    start = g * CHUNK
    end = tl.minimum(start + CHUNK, M)
    base = s.to(tl.int64) * sS
    for m0 in range(start, end, BLOCK_M):
        m = m0 + tl.arange(0, BLOCK_M)
        mask = (m < end)[:, None] & cmask[None, :]
        off = base + _offsets(m, c, P, sN, sC, sP)
        x = tl.load(X + off, mask=mask, other=0.0).to(ACC)
        y = x * scale[None, :] + shift[None, :]
        if RES:  # + the shortcut, rounded as the unfused ops round: BN's output, then the sum
            zoff = s.to(tl.int64) * zS + _offsets(m, c, P, zN, zC, zP)
            z = tl.load(Z + zoff, mask=mask, other=0.0).to(ACC)
            y = y.to(Y.dtype.element_ty).to(ACC) + z
        if ACT:  # ReLU; NaN stays NaN (as torch.relu)
            y = tl.where(y < 0, 0.0, y)
        tl.store(Y + off, y.to(Y.dtype.element_ty), mask=mask)


# fmt: off
@triton.jit
def _grad_stats_kernel(
    GR, X, Y, MEAN, PSG, PSGX, M, P, C, CHUNK, sS, sN, sC, sP, gS, gN, gC, gP,
    ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, ACT: tl.constexpr,
):
    # fmt: on
    s, pc, g = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    c = pc * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = c < C
    mean = tl.load(MEAN + s * C + c, mask=cmask, other=0.0)
    start = g * CHUNK
    end = tl.minimum(start + CHUNK, M)
    sg = tl.zeros([BLOCK_C], ACC)
    sgx = tl.zeros([BLOCK_C], ACC)
    for m0 in range(start, end, BLOCK_M):
        m = m0 + tl.arange(0, BLOCK_M)
        mask = (m < end)[:, None] & cmask[None, :]
        off = s.to(tl.int64) * sS + _offsets(m, c, P, sN, sC, sP)
        x = tl.load(X + off, mask=mask, other=0.0)
        gr = tl.load(GR + s.to(tl.int64) * gS + _offsets(m, c, P, gN, gC, gP), mask=mask, other=0.0)
        gr = _through_relu(gr.to(ACC), Y, off, mask, ACT)
        sg += tl.sum(gr, 0)
        sgx += tl.sum(tl.where(mask, gr * (x.to(ACC) - mean[None, :]), 0.0), 0)
    row = (s * tl.num_programs(2) + g).to(tl.int64) * C
    tl.store(PSG + row + c, sg, mask=cmask)
    tl.store(PSGX + row + c, sgx, mask=cmask)


# fmt: off
@triton.jit
def _grad_input_kernel(
    GR, X, Y, DX, DZ, MEAN, INVSTD, PSG, PSGX, W, DW, DB, S, M, P, C, CHUNK,
    sS, sN, sC, sP, gS, gN, gC, gP,
    ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_G: tl.constexpr,
    ACT: tl.constexpr, RES: tl.constexpr,
):
    # fmt: on
    s, pc, g = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    G = tl.num_programs(2)
    c = pc * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = c < C
    sg = _chunk_sums(PSG, s, c, cmask, G, C, BLOCK_G)
    sgx = _chunk_sums(PSGX, s, c, cmask, G, C, BLOCK_G)
    mean = tl.load(MEAN + s * C + c, mask=cmask, other=0.0)
    invstd = tl.load(INVSTD + s * C + c, mask=cmask, other=0.0)
    a = tl.load(W + c, mask=cmask, other=0.0).to(ACC) * invstd
    c1 = a * invstd * invstd * sgx / M  # a σ⁻¹ Σ(g x̂) / M
    c0 = c1 * mean - a * sg / M
    if (g == 0) & (s == 0):  # ∂w = Σ_r σ_r⁻¹ Σ g (x - μ_r), ∂b = Σ_r Σ g
        dw = tl.zeros([BLOCK_C], ACC)
        db = tl.zeros([BLOCK_C], ACC)
        for r in range(0, S):
            db += _chunk_sums(PSG, r, c, cmask, G, C, BLOCK_G)
            invstd_r = tl.load(INVSTD + r * C + c, mask=cmask, other=0.0)
            dw += _chunk_sums(PSGX, r, c, cmask, G, C, BLOCK_G) * invstd_r
        tl.store(DW + c, dw.to(DW.dtype.element_ty), mask=cmask)
        tl.store(DB + c, db.to(DB.dtype.element_ty), mask=cmask)
    start = g * CHUNK
    end = tl.minimum(start + CHUNK, M)
    for m0 in range(start, end, BLOCK_M):
        m = m0 + tl.arange(0, BLOCK_M)
        mask = (m < end)[:, None] & cmask[None, :]
        off = s.to(tl.int64) * sS + _offsets(m, c, P, sN, sC, sP)
        x = tl.load(X + off, mask=mask, other=0.0).to(ACC)
        goff = s.to(tl.int64) * gS + _offsets(m, c, P, gN, gC, gP)
        gr = _through_relu(tl.load(GR + goff, mask=mask, other=0.0).to(ACC), Y, off, mask, ACT)
        if RES:  # the shortcut's gradient: the sum's, through the ReLU
            tl.store(DZ + goff, gr.to(DZ.dtype.element_ty), mask=mask)
        dx = a[None, :] * gr - c1[None, :] * x + c0[None, :]
        tl.store(DX + off, dx.to(DX.dtype.element_ty), mask=mask)


def _layout(x: torch.Tensor, splits: int) -> tuple[torch.Tensor, tuple[int, int, int, int]]:
    """``x`` (N, C, H, W) as (s, N/s, C, H·W) strides, made contiguous if H, W do not merge."""
    if x.stride(2) != x.shape[3] * x.stride(3) and x.shape[2] > 1:
        x = x.contiguous()
    n, sn, sc, sp = x.shape[0] // splits, x.stride(0), x.stride(1), x.stride(3)
    return x, (n * sn, sn, sc, sp)


def _blocks(x: torch.Tensor, splits: int) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_C, chunk length, number of chunks G, M) for a launch over ``x``."""
    c = x.shape[1]
    m = x.numel() // c // splits
    block_c = min(triton.next_power_of_2(c), BLOCK_C_MAX)
    block_m = max(2, min(TILE // block_c, triton.next_power_of_2(m)))
    tiles = triton.cdiv(m, block_m)
    want = CHUNKS or (1 if INTERPRET else PROGRAMS // (splits * triton.cdiv(c, block_c)))
    want = max(1, min(want, MAX_CHUNKS))
    chunk = triton.cdiv(tiles, min(want, tiles)) * block_m
    return block_m, block_c, chunk, triton.cdiv(m, chunk), m


class Plan(NamedTuple):
    """One launch over ``x`` read as (s, N/s, C, H·W): the grid, the size and stride arguments
    (M, P, C, CHUNK; sS, sN, sC, sP) and the constexprs (``meta``; ``meta_g`` adds BLOCK_G)."""

    x: torch.Tensor
    grid: tuple[int, int, int]
    sizes: tuple[int, int, int, int]
    strides: tuple[int, int, int, int]
    meta: dict
    meta_g: dict


def _plan(x: torch.Tensor, splits: int) -> Plan:
    x, strides = _layout(x, splits)
    block_m, block_c, chunk, g, m = _blocks(x, splits)
    c = x.shape[1]
    acc = tl.float64 if x.dtype == torch.float64 else tl.float32
    meta = {"ACC": acc, "BLOCK_M": block_m, "BLOCK_C": block_c}
    grid = (splits, triton.cdiv(c, block_c), g)
    sizes = (m, x.shape[2] * x.shape[3], c, chunk)
    return Plan(x, grid, sizes, strides, meta, {**meta, "BLOCK_G": triton.next_power_of_2(g)})


def _stats(x: torch.Tensor, splits: int) -> tuple[torch.Tensor, torch.Tensor]:
    p = _plan(x, splits)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    pmean = x.new_empty((splits, p.grid[2], x.shape[1]), dtype=acc)
    pm2 = torch.empty_like(pmean)
    _stats_kernel[p.grid](p.x, pmean, pm2, *p.sizes, *p.strides, **p.meta)
    return pmean, pm2


def _normalize(
    x: torch.Tensor,
    pmean: torch.Tensor,
    pm2: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    params: torch.Tensor,
    residual: torch.Tensor | None = None,
    act: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    splits = pmean.shape[0]
    p = _plan(x, splits)
    y = torch.empty_like(p.x)  # the input's layout: the same strides as x
    mean = pmean.new_empty((splits, x.shape[1]))
    invstd = torch.empty_like(mean)
    z, zstrides = (p.x, p.strides) if residual is None else _layout(residual, splits)
    args = (p.x, y, z, pmean, pm2, weight, bias, running_mean, running_var, mean, invstd, params)
    flags = {"ACT": act, "RES": residual is not None}
    _normalize_kernel[p.grid](*args, splits, *p.sizes, *p.strides, *zstrides, **p.meta_g, **flags)
    return y, mean, invstd


def _grad_stats(
    grad: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, y: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    splits = mean.shape[0]
    p, g = _plan(x, splits), _layout(grad, splits)
    psg = mean.new_empty((splits, p.grid[2], x.shape[1]))
    psgx = torch.empty_like(psg)
    args = (g[0], p.x, p.x if y is None else y, mean, psg, psgx)  # y: the forward's, x's strides
    _grad_stats_kernel[p.grid](*args, *p.sizes, *p.strides, *g[1], **p.meta, ACT=y is not None)
    return psg, psgx


def _grad_input(
    grad: torch.Tensor,
    x: torch.Tensor,
    mean: torch.Tensor,
    invstd: torch.Tensor,
    psg: torch.Tensor,
    psgx: torch.Tensor,
    weight: torch.Tensor,
    y: torch.Tensor | None = None,
    residual: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    splits = mean.shape[0]
    p, g = _plan(x, splits), _layout(grad, splits)
    dx = torch.empty_like(p.x)
    dw, db = torch.empty_like(weight), torch.empty_like(weight)
    dz = torch.empty_like(g[0]) if residual else grad.new_empty(0)  # the gradient's strides
    ys = p.x if y is None else y
    args = (g[0], p.x, ys, dx, dz, mean, invstd, psg, psgx, weight, dw, db, splits)
    flags = {"ACT": y is not None, "RES": residual}
    _grad_input_kernel[p.grid](*args, *p.sizes, *p.strides, *g[1], **p.meta_g, **flags)
    return dx, dw, db, dz


LIB = torch.library.Library("negmine", "FRAGMENT")
SCHEMAS = {
    "split_bn_stats": ("(Tensor x, int splits) -> (Tensor, Tensor)", _stats),
    "split_bn_normalize": (
        "(Tensor x, Tensor pmean, Tensor pm2, Tensor weight, Tensor bias, Tensor(a!) running_mean,"
        " Tensor(b!) running_var, Tensor params, Tensor? residual=None, bool act=False)"
        " -> (Tensor, Tensor, Tensor)",
        _normalize,
    ),
    "split_bn_grad_stats": (
        "(Tensor grad, Tensor x, Tensor mean, Tensor? y=None) -> (Tensor, Tensor)",
        _grad_stats,
    ),
    "split_bn_grad_input": (
        "(Tensor grad, Tensor x, Tensor mean, Tensor invstd, Tensor psg, Tensor psgx,"
        " Tensor weight, Tensor? y=None, bool residual=False) -> (Tensor, Tensor, Tensor, Tensor)",
        _grad_input,
    ),
}
for _name, (_schema, _fn) in SCHEMAS.items():
    LIB.define(_name + _schema)
    LIB.impl(_name, _fn, "CompositeExplicitAutograd")
ops = torch.ops.negmine


class TritonSplitBatchNorm(torch.autograd.Function):
    """Split BN's training forward (updating the running statistics in place) and its backward,
    four kernel launches in all; returns y. With ``act``, y = relu(BN(x) [+ residual]): the
    ReLU and the residual block's shortcut sum in the normalising kernel, their backward
    (``threshold_backward`` from y, the shortcut's gradient) in the two backward kernels, so the
    block's ``add_``, ``relu_`` and ``threshold_backward`` launch nothing of their own."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        running_mean: torch.Tensor,
        running_var: torch.Tensor,
        splits: int,
        params: torch.Tensor,
        residual: torch.Tensor | None = None,
        act: bool = False,
    ) -> torch.Tensor:
        if residual is not None and not act:
            raise ValueError("split BN's fused shortcut sum comes with its ReLU (act=True)")
        pmean, pm2 = ops.split_bn_stats(x, splits)
        y, mean, invstd = ops.split_bn_normalize(
            x, pmean, pm2, weight, bias, running_mean, running_var, params, residual, act
        )
        ctx.save_for_backward(x, weight, mean, invstd, y if act else None)
        ctx.residual = residual is not None
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight, mean, invstd, y = ctx.saved_tensors
        psg, psgx = ops.split_bn_grad_stats(grad, x, mean, y)
        dx, dw, db, dz = ops.split_bn_grad_input(
            grad, x, mean, invstd, psg, psgx, weight, y, ctx.residual
        )
        return dx, dw, db, None, None, None, None, (dz if ctx.residual else None), None
