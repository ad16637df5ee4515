"""The one-class SVM's kernel evaluations as Triton kernels: the Gram matrix for the fit and the
decision function with the inlier mask, ONE launch each (each a ``negmine::`` op).

``gram``: for X (n, d) float64, in one launch,

    Q_ij = K(x_i, x_j) rounded to float32 (libsvm's ``Qfloat``), sq_i = |x_i|^2 (float64),
    bad_i = sum_k x_ik * 0 (0 for a finite row, NaN otherwise: the solver's input check),

with K = exp(-g ((|x_i|^2 + |x_j|^2) - 2 x_i.x_j)) (libsvm's ``kernel_rbf``, the operations of
:func:`negatives.ocsvm.smo._torch_formula`) or x_i.x_j ("linear"). It replaces the ~12 aten ops of
the finiteness check, |x|^2, the matmul and the formula before each Triton fit.

``score``: for Y (m, d) and a fitted (dense) dual,

    f(y) = sum_i a_i exp(-g |sv_i|^2 + 2 g sv_i . y - g |y|^2) - rho,    inlier = f(y) > 0

in float64 (libsvm's ``predict_values`` with double kernel values, as
:meth:`negatives.ocsvm.svm.OneClassSVM.decision_function`). MiOC scores the whole queue with it
after each fit: one launch instead of the ~13 aten ops of the batched path (a copy to float64,
|y|^2, the matmul, the exponent, the weighted sum, rho, the comparison), and no (n, m) kernel matrix
in memory. Each program takes ``BLOCK_M`` rows of Y (read in its own dtype, computed in float64) and
walks the support vectors in blocks of ``BLOCK_N``; a block whose coefficients are all zero (the
dense dual of a Triton fit is mostly zeros: about nu n of them are not) is skipped, which changes
nothing (its terms are 0 * a finite exp).

Dot products are ``tl.dot`` in float64 (the DMMA instruction on sm_80+); every row's |x|^2 is
computed by the same code on the same tile shape, so a point has one |x|^2 wherever it appears.
Floats reach the kernels in float64 tensors (a Python float argument would be rounded to float32
by Triton). With ``TRITON_INTERPRET=1`` set before triton is imported the kernels run on CPU
tensors in Triton's interpreter (the tests). Imports triton: import this lazily.
"""

# ruff: noqa: ANN001, ANN202  (Triton kernels: arguments are typed by the launch, not annotations)
from __future__ import annotations

import torch
import triton
import triton.language as tl

from negatives.ocsvm.smo_triton import INTERPRET, check_device

BLOCK_M, BLOCK_N = 64, 32  # score: rows of Y per program, support vectors per step
BLOCK_Q = 64  # gram: a program's tile of Q is BLOCK_Q x BLOCK_Q
# Triton's interpreter pays per program and per op, not per element: it runs the same code on
# tiles this many times wider (12x faster at MiOC's 1,024 points); the kernel tests set 1 to run
# the GPU's tiles
INTERPRET_SCALE = 4


def _wide() -> int:
    return INTERPRET_SCALE if INTERPRET else 1


def _block_d(d: int) -> int:
    return max(16, min(triton.next_power_of_2(d), 32))  # tl.dot: every dimension >= 16


@triton.jit
def _row_tile(X, rows, row_ok, k, d, stride, BLOCK_D: tl.constexpr):
    """Rows ``rows`` of X, columns k .. k + BLOCK_D, as float64 (zeros outside)."""
    c = k + tl.arange(0, BLOCK_D)
    ptr = X + rows.to(tl.int64)[:, None] * stride + c[None, :]
    return tl.load(ptr, mask=row_ok[:, None] & (c < d)[None, :], other=0.0).to(tl.float64)


@triton.jit
def _gram_kernel(
    X,
    GAMMA,
    Q,
    SQ,
    BAD,
    n,
    d,
    stride,
    LINEAR: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    pi = tl.program_id(0)
    pj = tl.program_id(1)
    ri = pi * BLOCK + tl.arange(0, BLOCK)
    rj = pj * BLOCK + tl.arange(0, BLOCK)
    oki = ri < n
    okj = rj < n
    dot = tl.zeros([BLOCK, BLOCK], tl.float64)
    sqi = tl.zeros([BLOCK], tl.float64)
    sqj = tl.zeros([BLOCK], tl.float64)
    bad = tl.zeros([BLOCK], tl.float64)
    for k in range(0, d, BLOCK_D):
        xi = _row_tile(X, ri, oki, k, d, stride, BLOCK_D)
        xj = _row_tile(X, rj, okj, k, d, stride, BLOCK_D)  # rows too: the same |x|^2 code
        sqi += tl.sum(xi * xi, 1)
        sqj += tl.sum(xj * xj, 1)
        bad += tl.sum(xi * 0.0, 1)
        dot = tl.dot(xi, tl.trans(xj), dot, out_dtype=tl.float64)
    if LINEAR:
        q = dot
    else:
        g = tl.load(GAMMA)
        q = tl.exp(((sqi[:, None] + sqj[None, :]) - 2.0 * dot) * (-g))
    ptr = Q + ri.to(tl.int64)[:, None] * n + rj[None, :]
    tl.store(ptr, q.to(tl.float32), mask=oki[:, None] & okj[None, :])
    if pj == 0:
        tl.store(SQ + ri, sqi, mask=oki)
        tl.store(BAD + ri, bad, mask=oki)


@triton.jit
def _score_kernel(
    Y,
    SV,
    SV_SQ,
    COEF,
    RHO,
    GAMMA,
    F,
    MASK,
    m,
    n,
    d,
    stride_y,
    stride_sv,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < m
    g = tl.load(GAMMA)
    y_sq = tl.zeros([BLOCK_M], tl.float64)
    for k in range(0, d, BLOCK_D):
        y = _row_tile(Y, rows, row_ok, k, d, stride_y, BLOCK_D)
        y_sq += tl.sum(y * y, 1)
    f = tl.zeros([BLOCK_M], tl.float64)
    svs = tl.arange(0, BLOCK_N)
    for j in range(0, n, BLOCK_N):
        s = j + svs
        sv_ok = s < n
        a = tl.load(COEF + s, mask=sv_ok, other=0.0)
        if tl.sum((a != 0.0).to(tl.int32), 0) > 0:
            dot = tl.zeros([BLOCK_M, BLOCK_N], tl.float64)
            for k in range(0, d, BLOCK_D):
                y = _row_tile(Y, rows, row_ok, k, d, stride_y, BLOCK_D)
                sv = _row_tile(SV, s, sv_ok, k, d, stride_sv, BLOCK_D)
                dot = tl.dot(y, tl.trans(sv), dot, out_dtype=tl.float64)
            sv_sq = tl.load(SV_SQ + s, mask=sv_ok, other=0.0)
            e = tl.exp((2.0 * g) * dot - g * sv_sq[None, :] - g * y_sq[:, None])
            f += tl.sum(e * a[None, :], 1)
    f = f - tl.load(RHO)
    tl.store(F + rows, f, mask=row_ok)
    tl.store(MASK + rows, f > 0.0, mask=row_ok)


def _gram(
    X: torch.Tensor, gamma: torch.Tensor, linear: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One launch: X (n, d) float64, gamma (1,) float64 on X's device. Returns (Q (n, n) float32,
    |x|^2 (n,) float64, per-row 0 / NaN (n,) float64), unread (no host sync)."""
    n, d = X.shape
    check_device(X.device, "kernel matrix")
    X = X if X.stride(1) == 1 else X.contiguous()
    Q = torch.empty(n, n, dtype=torch.float32, device=X.device)
    sq, bad = torch.empty(2, n, dtype=torch.float64, device=X.device)
    block = BLOCK_Q * _wide()
    grid = (triton.cdiv(n, block), triton.cdiv(n, block))
    kw = {} if INTERPRET else {"num_warps": 4}
    _gram_kernel[grid](
        X,
        gamma,
        Q,
        sq,
        bad,
        n,
        d,
        X.stride(0),
        LINEAR=linear,
        BLOCK=block,
        BLOCK_D=_block_d(d),
        **kw,
    )
    return Q, sq, bad


def _score(
    Y: torch.Tensor,
    sv: torch.Tensor,
    sv_sq: torch.Tensor,
    coef: torch.Tensor,
    rho: torch.Tensor,
    gamma: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One launch: Y (m, d) any float dtype, sv (n, d) float64, sv_sq = |sv|^2 (n,), coef (n,),
    rho (1,) and gamma (1,) float64, all on one device. Returns (f (m,) float64, f > 0 (m,) bool),
    unread (no host sync)."""
    m, d = Y.shape
    check_device(Y.device, "scoring")
    Y = Y if Y.stride(1) == 1 else Y.contiguous()
    sv = sv if sv.stride(1) == 1 else sv.contiguous()
    f = torch.empty(m, dtype=torch.float64, device=Y.device)
    mask = torch.empty(m, dtype=torch.bool, device=Y.device)
    kw = {} if INTERPRET else {"num_warps": 4}
    block_m, block_n = BLOCK_M * _wide(), BLOCK_N * _wide()
    _score_kernel[(triton.cdiv(m, block_m),)](
        Y,
        sv,
        sv_sq,
        coef,
        rho,
        gamma,
        f,
        mask,
        m,
        len(sv),
        d,
        Y.stride(0),
        sv.stride(0),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=_block_d(d),
        **kw,
    )
    return f, mask


LIB = torch.library.Library("negmine", "FRAGMENT")
LIB.define("ocsvm_gram(Tensor X, Tensor gamma, bool linear) -> (Tensor, Tensor, Tensor)")
LIB.impl("ocsvm_gram", _gram, "CompositeExplicitAutograd")
LIB.define(
    "ocsvm_rbf_score(Tensor Y, Tensor sv, Tensor sv_sq, Tensor coef, Tensor rho, Tensor gamma)"
    " -> (Tensor, Tensor)"
)
LIB.impl("ocsvm_rbf_score", _score, "CompositeExplicitAutograd")
# each one op: the op counter and the profiler see one launch
gram = torch.ops.negmine.ocsvm_gram
score = torch.ops.negmine.ocsvm_rbf_score
