"""libsvm's SMO for the one-class dual as ONE Triton program, its state in registers (n <= 1024).

The engine of ``OneClassSVM(loop="triton_regs")``, see :mod:`negatives.ocsvm`: the same solver as
:mod:`negatives.ocsvm.smo_triton` (``Solver::Solve`` of libsvm as vendored in scikit-learn 1.9.1,
``sklearn/svm/src/libsvm/svm.cpp``, with the second-order working set selection WSS2 of Fan, Chen,
Lin, "Working Set Selection Using Second Order Information for Training Support Vector Machines",
JMLR 6, 2005), the same decisions and iterations, but without a round trip through global memory
in an iteration. That kernel keeps its state in global scratch in libsvm's *position* order and
swaps it when shrinking, so each iteration waits on a chain of global stores, barriers and loads.
Here every variable is one lane of a register vector (``tl.arange(0, NPAD)``, NPAD the next power
of two >= n, at most 1,024), in the ORIGINAL order, and libsvm's order is a register vector too:

- ``alpha``, ``G``, ``G_bar``, ``QD`` per point, and ``pos``, the point's current libsvm position
  (the identity at the start; shrinking's swaps exchange positions, not data). The active set is
  ``pos < A``;
- ``select_working_set`` (WSS2): i is the LAST position reaching the minimum of G over alpha < C,
  j the last position reaching the maximum of (Gmax + G_t)^2 / quad_t over alpha_t > 0 (libsvm
  compares with ``<=`` / ``>=`` in position order): a min (max) reduction, then a max reduction
  of the key ``pos * NPAD + lane`` over the lanes reaching it, which gives the point of the last
  position. ``Gmax + Gmax2 < eps`` stops;
- the rows Q_i, Q_j are read from the float32 kernel (libsvm's ``Qfloat``, original order: lane t
  reads Q[i, t]); the two-variable update and its clipping are scalars, the scalars of i and j
  (alpha_i, alpha_j, G_j, the quad of the pair) come out of ONE sum reduction of a (NPAD, 2, 2)
  tensor, and G, G_bar are updated by one vector operation each;
- ``do_shrinking`` every min(l, 1000) iterations: the unshrink test, ``be_shrunk``, and libsvm's
  swaps (the r-th shrunk position below the new active size, ascending, with the r-th kept
  position from the top) computed as new positions, by prefix sums in position order through a
  small global scratch (shrinking is rare: none in MiOC's fits of 256 or 1,024 points);
- ``reconstruct_gradient`` (the free alphas in position order, from the scratch) when the active
  set is optimal (then the whole set is checked again) and after ``max_iter``, ``calculate_rho``,
  and non-finite input (a nonzero or NaN entry of ``bad``): no iteration, rho NaN, a flag.

Floats come in a float64 tensor and the kernel is compiled without FMA contraction
(``enable_fp_fusion=False``), so every operation rounds as libsvm's double arithmetic does, as in
:mod:`negatives.ocsvm.smo_triton`. With ``TRITON_INTERPRET=1`` set before triton is imported the
same program runs on CPU tensors in Triton's interpreter (the tests). Imports triton: import this
lazily.
"""

# ruff: noqa: ANN001, ANN202  (Triton kernels: arguments are typed by the launch, not annotations)
from __future__ import annotations

import warnings

import torch
import triton
import triton.language as tl

from negatives.ocsvm import smo_triton  # its launch, op definition and result store

MAX_N = 1024  # the largest fit whose state this program keeps in registers
_INF = tl.constexpr(float("inf"))  # exact in float32: a safe literal


@triton.jit
def _reconstruct(Q, G, Gbar, alpha, pos, lanes, valid, n, A, iscr, fscr):
    """``reconstruct_gradient``: G of the shrunk points (pos >= A) from G_bar and the free alphas
    of the active positions, added in position order (read back through the scratch)."""
    tl.debug_barrier()  # earlier readers of the scratch are done
    tl.store(iscr + pos, lanes, mask=valid)  # position -> point
    tl.store(fscr + pos, alpha, mask=valid)  # alpha by position
    tl.debug_barrier()
    shrunk = valid & (pos >= A)
    G = tl.where(shrunk, Gbar + 0.0, G)
    for t in range(0, A):
        at = tl.load(fscr + t)
        if (at > 0.0) & (at < 1.0):
            row = Q + tl.load(iscr + t).to(tl.int64) * n
            q = tl.load(row + lanes, mask=shrunk, other=0.0).to(tl.float64)
            G = tl.where(shrunk, G + at * q, G)
    return G


@triton.jit
def _shrink(
    Q, G, Gbar, alpha, pos, lanes, valid, n, A, unshrink, eps, iscr, fscr, NPAD: tl.constexpr
):
    """``do_shrinking``: returns (A, unshrink, G, pos) after libsvm's swaps, as new positions."""
    act = pos < A
    gmax1 = -tl.min(tl.where(act & (alpha < 1.0), G, _INF), 0)  # max -G over alpha < C
    gmax2 = tl.max(tl.where(act & (alpha > 0.0), G, -_INF), 0)  # max G over alpha > 0
    if (unshrink == 0) & (gmax1 + gmax2 <= eps * 10):
        unshrink = tl.full([], 1, tl.int32)
        G = _reconstruct(Q, G, Gbar, alpha, pos, lanes, valid, n, A, iscr, fscr)
        A = n
    act = pos < A
    out = act & (((alpha >= 1.0) & (-G > gmax1)) | ((alpha <= 0.0) & (G > gmax2)))  # be_shrunk
    keep = A - tl.sum(out.to(tl.int32), 0)
    left = out & (pos < keep)  # shrunk below keep: swapped with a kept position from keep on
    right = act & (~out) & (pos >= keep)
    n_left = tl.sum(left.to(tl.int32), 0)
    flag = iscr  # by position: 1 left, 2 right, 0 else
    sl = iscr + NPAD  # left positions, ascending
    sr = iscr + 2 * NPAD  # right positions, ascending
    dest = iscr + 3 * NPAD  # the position each position moves to
    tl.debug_barrier()
    tl.store(flag + pos, left.to(tl.int32) + 2 * right.to(tl.int32), mask=valid)
    tl.debug_barrier()
    f = tl.load(flag + lanes, mask=valid, other=0)  # lane = position here
    is_l = f == 1
    is_r = f == 2
    rank_l = tl.cumsum(is_l.to(tl.int32), 0) - 1
    rank_r = tl.cumsum(is_r.to(tl.int32), 0) - 1
    tl.store(sl + rank_l, lanes, mask=is_l)
    tl.store(sr + rank_r, lanes, mask=is_r)
    tl.debug_barrier()
    # libsvm walks up and swaps each shrunk position with the last kept one: left[r] <-> the
    # r-th right position from the top
    to_r = tl.load(sr + (n_left - 1 - rank_l), mask=is_l, other=0)
    to_l = tl.load(sl + (n_left - 1 - rank_r), mask=is_r, other=0)
    tl.store(dest + lanes, tl.where(is_l, to_r, tl.where(is_r, to_l, lanes)), mask=valid)
    tl.debug_barrier()
    pos = tl.where(valid, tl.load(dest + pos, mask=valid, other=0), pos)
    return keep, unshrink, G, pos


@triton.jit
def _smo_regs_kernel(
    Q,  # (n, n) float32 kernel, original order
    QD0,  # (n,) float64 diagonal, original order
    alpha0,  # (n,) float64 initial alpha (read only)
    alpha_out,  # (n,) float64 result, original order
    iscr,  # (4, NPAD) int32 scratch of the shrinking and the gradient reconstruction
    fscr,  # (NPAD,) float64 scratch of the gradient reconstruction
    consts,  # (2,) float64: eps, TAU
    bad,  # (n,) float64: 0 for a finite point, NaN else (``kernels_triton.gram``)
    out_rho,  # (1,) float64
    out_it,  # (3,) int64: iterations, 1 if max_iter stopped the solver, 1 if bad input
    n,
    n_init,  # alphas > 0 at the start: 0 .. n_init - 1
    max_iter,
    SHRINK: tl.constexpr,
    NPAD: tl.constexpr,
):
    eps = tl.load(consts)
    tau = tl.load(consts + 1)
    lanes = tl.arange(0, NPAD)
    valid = lanes < n
    finite = tl.sum((tl.load(bad + lanes, mask=valid, other=0.0) != 0.0).to(tl.int32), 0) == 0
    G = tl.zeros([NPAD], tl.float64)
    Gbar = tl.zeros([NPAD], tl.float64)
    for t in range(0, n_init):  # initial gradient, summed in libsvm's order
        at = tl.load(alpha0 + t)
        q = tl.load(Q + n.to(tl.int64) * t + lanes, mask=valid, other=0.0).to(tl.float64)
        G += at * q
        Gbar += tl.where(at >= 1.0, q, 0.0)
    alpha = tl.load(alpha0 + lanes, mask=valid, other=0.0)
    QD = tl.load(QD0 + lanes, mask=valid, other=1.0)
    pos = lanes  # libsvm's position of each point (padding lanes: >= n, never active)
    A = n  # active size
    unshrink = tl.full([], 0, tl.int32)
    counter = tl.minimum(n, 1000) + 1
    retry = tl.full([], 0, tl.int32)  # 1: optimal on the active set, select on all positions
    it = tl.full([], 0, tl.int32)
    max_iter = tl.where(finite, max_iter, 0)
    go = max_iter > 0
    while go:
        if SHRINK:
            if retry == 0:
                counter -= 1
                if counter == 0:
                    counter = tl.minimum(n, 1000)
                    A, unshrink, G, pos = _shrink(
                        Q, G, Gbar, alpha, pos, lanes, valid, n, A, unshrink, eps, iscr, fscr, NPAD
                    )
        act = pos < A
        key = pos * NPAD + lanes  # the largest key among tied lanes: the last position
        # select_working_set (WSS2): i = the last argmin of G over alpha < C
        v = tl.where(act & (alpha < 1.0), G, _INF)
        gmin = tl.min(v, 0)  # -Gmax
        ie = tl.maximum(tl.max(tl.where(act & (v == gmin), key, -1), 0), 0) % NPAD
        qi = tl.load(Q + ie.to(tl.int64) * n + lanes, mask=valid, other=0.0).to(tl.float64)
        qdi = tl.load(QD0 + ie)
        is_i = lanes == ie
        # j = the last argmax of (Gmax + G_t)^2 / quad_t over alpha_t > 0 with Gmax + G_t > 0
        gd = tl.where(act & (alpha > 0.0), G, -_INF) - gmin
        r = tl.maximum(gd, 0.0)
        quad = (qdi + QD) - 2.0 * qi
        quad = tl.where(quad > 0.0, quad, tau)
        val = tl.where(act, r * r / quad, -1.0)
        best, gdmax = tl.split(tl.max(tl.join(val, tl.where(act, gd, -_INF)), 0))  # gdmax:
        # Gmax + Gmax2
        je = tl.maximum(tl.max(tl.where(act & (val == best), key, -1), 0), 0) % NPAD
        stop = gdmax < eps
        if stop:
            if A < n:  # optimal on the active set: unshrink everything and check again
                G = _reconstruct(Q, G, Gbar, alpha, pos, lanes, valid, n, A, iscr, fscr)
                A = n
                retry = tl.full([], 1, tl.int32)
                counter = tl.full([], 1, tl.int32)  # shrink next time unless it stops
            else:
                go = ~stop
        else:
            # alpha_i, alpha_j, G_j and the pair's quad (as selected) in one reduction
            is_j = lanes == je
            pick = tl.join(
                tl.join(tl.where(is_i, alpha, 0.0), tl.where(is_j, alpha, 0.0)),
                tl.join(tl.where(is_j, G, 0.0), tl.where(is_j, quad, 0.0)),
            )
            ai_aj, gj_quad = tl.split(tl.sum(pick, 0))
            ai, aj = tl.split(ai_aj)
            gj, quad_ij = tl.split(gj_quad)
            qj = tl.load(Q + je.to(tl.int64) * n + lanes, mask=valid, other=0.0).to(tl.float64)
            # the two-variable step for y_i = y_j, C = 1, with libsvm's clipping
            delta = (gmin - gj) / quad_ij
            tot = ai + aj
            ni = ai - delta
            nj = aj + delta
            c = tot > 1.0
            hit = tl.where(c, ni > 1.0, nj < 0.0)  # clip alpha_i at C, or alpha_j at 0
            ni2 = tl.where(hit, tl.where(c, 1.0, tot), ni)
            nj2 = tl.where(hit, tl.where(c, tot - 1.0, 0.0), nj)
            hit = tl.where(c, nj2 > 1.0, ni2 < 0.0)  # clip alpha_j at C, or alpha_i at 0
            ni = tl.where(hit, tl.where(c, tot - 1.0, 0.0), ni2)
            nj = tl.where(hit, tl.where(c, 1.0, tot), nj2)
            dai = ni - ai
            daj = nj - aj
            ci = (ni >= 1.0).to(tl.float64) - (ai >= 1.0).to(tl.float64)  # G_bar: +-Q_i or 0
            cj = (nj >= 1.0).to(tl.float64) - (aj >= 1.0).to(tl.float64)
            bar = (ci != 0.0) | (cj != 0.0)
            G = tl.where(act, G + (qi * dai + qj * daj), G)
            Gbar = tl.where(bar, (Gbar + ci * qi) + cj * qj, Gbar)  # padding lanes: + 0
            alpha = tl.where(is_i, ni, tl.where(is_j, nj, alpha))
            it += 1
            retry = tl.full([], 0, tl.int32)
            go = it < max_iter
    timed_out = (it >= max_iter) & finite
    if timed_out & (A < n):  # libsvm reconstructs G before rho after max_iter
        G = _reconstruct(Q, G, Gbar, alpha, pos, lanes, valid, n, A, iscr, fscr)
    # calculate_rho (y = +1): mean G of the free alphas, else the midpoint of the bounds
    free = valid & (alpha > 0.0) & (alpha < 1.0)
    total = tl.sum(tl.where(free, G, 0.0), 0)
    n_free = tl.sum(free.to(tl.int32), 0)
    ub = tl.min(tl.where(valid & (alpha <= 0.0), G, _INF), 0)
    lb = tl.max(tl.where(valid & (alpha >= 1.0), G, -_INF), 0)
    rho = smo_triton._rho(total, n_free, ub, lb)
    tl.store(alpha_out + lanes, alpha, mask=valid)
    smo_triton._store_result(out_rho, out_it, rho, it, timed_out, finite)


def takes(n: int, owner: dict) -> bool:
    """Whether this program fits n points (n <= MAX_N); past that, warns once per ``owner`` (an
    OneClassSVM's ``__dict__``) that :mod:`negatives.ocsvm.smo_triton` fits instead (the same
    iterates)."""
    if n <= MAX_N:
        return True
    if not owner.get("_regs_warned"):
        owner["_regs_warned"] = True
        warnings.warn(
            f"OneClassSVM(loop='triton_regs') keeps the solver's state in registers for n <= "
            f"{MAX_N} points; fitting n = {n} (and every larger fit of this OneClassSVM, warned "
            "once) with loop='triton' instead (the same iterates)",
            RuntimeWarning,
            stacklevel=5,
        )
    return False


def num_warps(npad: int) -> int:
    """Warps of the program: 4 up to 512 lanes, 8 for 1,024 (4 float64 lanes a thread)."""
    return 4 if npad <= 512 else 8


def _solve(
    Q: torch.Tensor,
    QD: torch.Tensor,
    alpha0: torch.Tensor,
    n_init: int,
    params: torch.Tensor,
    bad: torch.Tensor,
    max_iter: int,
    shrinking: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One launch of the register SMO program; the arguments and results of
    :func:`negatives.ocsvm.smo_triton.solve` (results on the device, unread), for n <= 1,024."""
    n = len(QD)
    if n > MAX_N:
        raise ValueError(
            f"loop='triton_regs' keeps the solver's state in registers for n <= {MAX_N} points, "
            f"got n = {n}; use loop='triton'"
        )
    npad = max(16, triton.next_power_of_2(n))
    scratch = (((4, npad), torch.int32), ((npad,), torch.float64))  # iscr, fscr
    problem = (Q, QD, alpha0, n_init, params, bad, max_iter, shrinking)
    return smo_triton.launch(_smo_regs_kernel, problem, scratch, num_warps(npad), NPAD=npad)


solve = smo_triton.define("ocsvm_smo_regs", _solve)  # one op, as smo_triton.solve
