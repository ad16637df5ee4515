"""libsvm's SMO for the one-class dual as ONE Triton program: a whole fit in one kernel launch.

The engine of ``OneClassSVM(loop="triton")`` (the CUDA default), see :mod:`negatives.ocsvm`. It runs
the loop of :mod:`negatives.ocsvm.smo` (``Solver::Solve`` of libsvm as vendored in scikit-learn
1.9.1, ``sklearn/svm/src/libsvm/svm.cpp``) in a single program (grid = (1,)), so a fit costs one
launch of this kernel whatever its iteration count, and nothing in it waits for the host:

- the state (alpha, G, G_bar, the position -> index map ``perm``, QD) lives in global scratch in
  float64, in libsvm's *position* order (shrinking swaps positions);
- the kernel Q = K(X, X) is precomputed as float32 (libsvm's ``Qfloat``) and row i of position p is
  read as Q[perm[p], perm[:]];
- ``select_working_set`` (WSS2) is two block-wise reductions over the active positions, with
  libsvm's tie-breaking (the last index reaching the min / max, as ``smo``'s ``min_last`` /
  ``max_last``); ``Gmax + Gmax2 < eps`` stops;
- the two-variable update and its clipping as scalars, then one pass that updates G on the active
  set and G_bar where an alpha reached or left C = 1;
- shrinking every min(l, 1000) iterations (``do_shrinking``: the unshrink test, ``be_shrunk``, and
  libsvm's swaps computed by prefix sums), ``reconstruct_gradient`` when the active set is optimal
  (then the full set is checked again) and after ``max_iter``;
- ``calculate_rho``, and alpha written back in the original order;
- non-finite input (a nonzero or NaN entry of ``bad``, one per point): no iteration, rho NaN,
  and a flag in the output, so that nothing waits for the host to check the input.

Floats are passed in a float64 tensor (a Python float argument or literal would be rounded to
float32 by Triton) and the kernel is compiled without FMA contraction (``enable_fp_fusion=False``),
so every operation rounds as libsvm's double arithmetic does. Threads of the program share the
scratch through global memory, so every write that another thread reads is followed by
``tl.debug_barrier()`` (``__syncthreads``).

With ``TRITON_INTERPRET=1`` set before triton is imported, the functions are Triton's interpreter
functions and the same program runs on CPU tensors (slowly: the tests use n <= 256, in a fresh
process). The selection and the update are written inline in the kernel, not as helper functions:
the interpreter pays about a millisecond per helper call. Imports triton: import this lazily.
"""

# ruff: noqa: ANN001, ANN202  (Triton kernels: arguments are typed by the launch, not annotations)
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"  # read by triton at its import too
_jit = triton.jit

_INF = tl.constexpr(float("inf"))  # exact in float32: a safe literal (0.1, 1e-12 are not)


@_jit
def _reconstruct(Q, alpha, G, Gbar, perm, n, A, BLOCK: tl.constexpr):
    """``reconstruct_gradient``: G on [A, n) from G_bar and the free alphas, in position order."""
    offs = tl.arange(0, BLOCK)
    for b in range(A, n, BLOCK):
        p = b + offs
        ok = p < n
        tl.store(G + p, tl.load(Gbar + p, mask=ok, other=0.0) + 0.0, mask=ok)
    tl.debug_barrier()
    for t in range(0, A):
        at = tl.load(alpha + t)
        if (at > 0.0) & (at < 1.0):
            ot = tl.load(perm + t)
            for b in range(A, n, BLOCK):
                p = b + offs
                ok = p < n
                g = tl.load(G + p, mask=ok, other=0.0)
                q = tl.load(
                    Q + ot.to(tl.int64) * n + tl.load(perm + p, mask=ok, other=0),
                    mask=ok,
                    other=0.0,
                )
                tl.store(G + p, g + at * q.to(tl.float64), mask=ok)
    tl.debug_barrier()


@_jit
def _swap(x, pl, pr, ok):
    vl = tl.load(x + pl, mask=ok)
    vr = tl.load(x + pr, mask=ok)
    tl.store(x + pl, vr, mask=ok)
    tl.store(x + pr, vl, mask=ok)


@_jit
def _shrink(Q, QD, alpha, G, Gbar, perm, sl, sr, n, A, unshrink, eps, BLOCK: tl.constexpr):
    """``do_shrinking``: returns (A, unshrink) after libsvm's swaps of the shrunk positions."""
    offs = tl.arange(0, BLOCK)
    gmax1 = tl.full([], -_INF, tl.float64)  # max -G over alpha < C
    gmax2 = tl.full([], -_INF, tl.float64)  # max G over alpha > 0
    for b in range(0, A, BLOCK):
        p = b + offs
        ok = p < A
        g = tl.load(G + p, mask=ok, other=0.0)
        a = tl.load(alpha + p, mask=ok, other=0.0)
        gmax1 = tl.maximum(gmax1, -tl.min(tl.where(ok & (a < 1.0), g, _INF), 0))
        gmax2 = tl.maximum(gmax2, tl.max(tl.where(ok & (a > 0.0), g, -_INF), 0))
    if (unshrink == 0) & (gmax1 + gmax2 <= eps * 10):
        unshrink = tl.full([], 1, tl.int32)
        _reconstruct(Q, alpha, G, Gbar, perm, n, A, BLOCK)
        A = n
    n_out = tl.full([], 0, tl.int32)
    for b in range(0, A, BLOCK):  # be_shrunk
        p = b + offs
        ok = p < A
        g = tl.load(G + p, mask=ok, other=0.0)
        a = tl.load(alpha + p, mask=ok, other=0.0)
        out = ok & (((a >= 1.0) & (-g > gmax1)) | ((a <= 0.0) & (g > gmax2)))
        n_out += tl.sum(out.to(tl.int32), 0)
    keep = A - n_out
    n_left = tl.full([], 0, tl.int32)  # shrunk below keep, ascending (sl)
    n_right = tl.full([], 0, tl.int32)  # kept from keep on, ascending (sr)
    for b in range(0, A, BLOCK):
        p = b + offs
        ok = p < A
        g = tl.load(G + p, mask=ok, other=0.0)
        a = tl.load(alpha + p, mask=ok, other=0.0)
        out = ok & (((a >= 1.0) & (-g > gmax1)) | ((a <= 0.0) & (g > gmax2)))
        left = out & (p < keep)
        right = ok & (~out) & (p >= keep)
        tl.store(sl + n_left + tl.cumsum(left.to(tl.int32), 0) - 1, p, mask=left)
        tl.store(sr + n_right + tl.cumsum(right.to(tl.int32), 0) - 1, p, mask=right)
        n_left += tl.sum(left.to(tl.int32), 0)
        n_right += tl.sum(right.to(tl.int32), 0)
    tl.debug_barrier()
    # libsvm walks up and swaps each shrunk position with the last kept one: left[r] <-> the
    # r-th kept position from the top
    for b in range(0, n_left, BLOCK):
        r = b + offs
        ok = r < n_left
        pl = tl.load(sl + r, mask=ok, other=0)
        pr = tl.load(sr + (n_left - 1 - r), mask=ok, other=0)
        _swap(alpha, pl, pr, ok)
        _swap(G, pl, pr, ok)
        _swap(Gbar, pl, pr, ok)
        _swap(perm, pl, pr, ok)
        _swap(QD, pl, pr, ok)
    tl.debug_barrier()
    return keep, unshrink


@_jit
def _rho(total, n_free, ub, lb):
    """The end of ``calculate_rho`` (y = +1), shared by both SMO programs: the mean G of the free
    alphas (``total`` / ``n_free``), else the midpoint of the bounds ``ub``, ``lb``."""
    return tl.where(n_free > 0, total / tl.maximum(n_free, 1).to(tl.float64), (ub + lb) / 2.0)


@_jit
def _store_result(out_rho, out_it, rho, it, timed_out, finite):
    """The outputs of both SMO programs: rho (NaN for non-finite input), then (iterations, timed
    out, bad input)."""
    tl.store(out_rho, tl.where(finite, rho, _INF - _INF))  # NaN: no NaN global (Triton's
    # per-launch check of the globals compares them with != , and NaN != NaN)
    tl.store(out_it, it.to(tl.int64))
    tl.store(out_it + 1, timed_out.to(tl.int64))
    tl.store(out_it + 2, (~finite).to(tl.int64))


@_jit
def _smo_kernel(
    Q,  # (n, n) float32 kernel, original order
    QD0,  # (n,) float64 diagonal, original order
    alpha0,  # (n,) float64 initial alpha (read only)
    alpha_out,  # (n,) float64 result, original order
    scratch,  # (4, n) float64: alpha, G, G_bar, QD in position order
    iscratch,  # (3, n) int32: perm, shrink lists
    consts,  # (2,) float64: eps, TAU (not `params`: a local of Triton's generated binder)
    bad,  # (n,) float64: 0 for a finite point, NaN else (``kernels_triton.gram``)
    out_rho,  # (1,) float64
    out_it,  # (3,) int64: iterations, 1 if max_iter stopped the solver, 1 if bad input
    n,
    n_init,  # alphas > 0 at the start: 0 .. n_init - 1
    max_iter,
    SHRINK: tl.constexpr,
    BLOCK: tl.constexpr,
):
    eps = tl.load(consts)
    tau = tl.load(consts + 1)
    alpha = scratch
    G = scratch + n
    Gbar = scratch + 2 * n
    QD = scratch + 3 * n
    perm = iscratch
    sl = iscratch + n
    sr = iscratch + 2 * n
    offs = tl.arange(0, BLOCK)
    n_bad = tl.full([], 0, tl.int32)  # non-finite input: no iteration, rho NaN
    for b in range(0, n, BLOCK):
        p = b + offs
        n_bad += tl.sum((tl.load(bad + p, mask=p < n, other=0.0) != 0.0).to(tl.int32), 0)
    finite = n_bad == 0
    for b in range(0, n, BLOCK):  # initial gradient, summed in libsvm's order
        p = b + offs
        ok = p < n
        g = tl.zeros([BLOCK], tl.float64)
        gb = tl.zeros([BLOCK], tl.float64)
        for t in range(0, n_init):
            at = tl.load(alpha0 + t)
            q = tl.load(Q + n.to(tl.int64) * t + p, mask=ok, other=0.0).to(tl.float64)
            g += at * q
            gb += tl.where(at >= 1.0, q, 0.0)
        tl.store(G + p, g, mask=ok)
        tl.store(Gbar + p, gb, mask=ok)
        tl.store(alpha + p, tl.load(alpha0 + p, mask=ok, other=0.0), mask=ok)
        tl.store(QD + p, tl.load(QD0 + p, mask=ok, other=0.0), mask=ok)
        tl.store(perm + p, p, mask=ok)
    tl.debug_barrier()
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
                    A, unshrink = _shrink(
                        Q, QD, alpha, G, Gbar, perm, sl, sr, n, A, unshrink, eps, BLOCK
                    )
        # select_working_set (WSS2) on [0, A): i = the last argmin of G over alpha < C
        gmin = tl.full([], _INF, tl.float64)  # -Gmax
        i = tl.full([], 0, tl.int32)
        for b in range(0, A, BLOCK):
            p = b + offs
            ok = p < A
            g = tl.load(G + p, mask=ok, other=0.0)
            a = tl.load(alpha + p, mask=ok, other=1.0)
            v = tl.where(ok & (a < 1.0), g, _INF)
            m = tl.min(v, 0)
            k = tl.max(tl.where(ok & (v == m), p, -1), 0)
            take = m <= gmin
            gmin = tl.where(take, m, gmin)
            i = tl.where(take, k, i)
        row_i = Q + tl.load(perm + i).to(tl.int64) * n
        qdi = tl.load(QD + i)
        # j = the last argmax of (Gmax + G_t)^2 / quad_t over alpha_t > 0 with Gmax + G_t > 0
        best = tl.full([], -1.0, tl.float64)
        j = tl.full([], 0, tl.int32)
        gdmax = tl.full([], -_INF, tl.float64)  # Gmax + Gmax2
        for b in range(0, A, BLOCK):
            p = b + offs
            ok = p < A
            g = tl.load(G + p, mask=ok, other=0.0)
            a = tl.load(alpha + p, mask=ok, other=0.0)
            q = tl.load(row_i + tl.load(perm + p, mask=ok, other=0), mask=ok, other=0.0)
            qd = tl.load(QD + p, mask=ok, other=1.0)
            gd = tl.where(ok & (a > 0.0), g, -_INF) - gmin
            r = tl.maximum(gd, 0.0)
            quad = (qdi + qd) - 2.0 * q.to(tl.float64)
            quad = tl.where(quad > 0.0, quad, tau)
            val = tl.where(ok, r * r / quad, -1.0)
            m = tl.max(val, 0)
            k = tl.max(tl.where(ok & (val == m), p, -1), 0)
            take = m >= best
            best = tl.where(take, m, best)
            j = tl.where(take, k, j)
            gdmax = tl.maximum(gdmax, tl.max(tl.where(ok, gd, -_INF), 0))
        stop = gdmax < eps
        if stop:
            if A < n:  # optimal on the active set: unshrink everything and check again
                _reconstruct(Q, alpha, G, Gbar, perm, n, A, BLOCK)
                A = n
                retry = tl.full([], 1, tl.int32)
                counter = tl.full([], 1, tl.int32)  # shrink next time unless it stops
            else:
                go = ~stop
        else:
            # the two-variable step for y_i = y_j, C = 1, with libsvm's clipping
            row_j = Q + tl.load(perm + j).to(tl.int64) * n
            ai = tl.load(alpha + i)
            aj = tl.load(alpha + j)
            quad = (qdi + tl.load(QD + j)) - 2.0 * tl.load(row_i + tl.load(perm + j)).to(tl.float64)
            quad = tl.where(quad > 0.0, quad, tau)
            delta = (tl.load(G + i) - tl.load(G + j)) / quad
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
            tl.debug_barrier()  # every thread has read alpha_i, alpha_j before they change
            tl.store(alpha + i, ni)
            tl.store(alpha + j, nj)
            for b in range(0, n, BLOCK):  # G on [0, A); G_bar on [0, n) if an alpha crossed C
                p = b + offs
                act = p < A
                on_bar = tl.where(bar, p < n, p < 0)
                ok = act | on_bar
                col = tl.load(perm + p, mask=ok, other=0)
                qi = tl.load(row_i + col, mask=ok, other=0.0).to(tl.float64)
                qj = tl.load(row_j + col, mask=ok, other=0.0).to(tl.float64)
                g = tl.load(G + p, mask=act, other=0.0)
                tl.store(G + p, g + (qi * dai + qj * daj), mask=act)
                gb = tl.load(Gbar + p, mask=on_bar, other=0.0)
                tl.store(Gbar + p, (gb + ci * qi) + cj * qj, mask=on_bar)
            tl.debug_barrier()
            it += 1
            retry = tl.full([], 0, tl.int32)
            go = it < max_iter
    timed_out = (it >= max_iter) & finite
    if timed_out & (A < n):  # libsvm reconstructs G before rho after max_iter
        _reconstruct(Q, alpha, G, Gbar, perm, n, A, BLOCK)
    # calculate_rho (y = +1): mean G of the free alphas, else the midpoint of the bounds
    total = tl.full([], 0.0, tl.float64)
    n_free = tl.full([], 0, tl.int32)
    ub = tl.full([], _INF, tl.float64)
    lb = tl.full([], -_INF, tl.float64)
    for b in range(0, n, BLOCK):
        p = b + offs
        ok = p < n
        g = tl.load(G + p, mask=ok, other=0.0)
        a = tl.load(alpha + p, mask=ok, other=0.0)
        free = ok & (a > 0.0) & (a < 1.0)
        total += tl.sum(tl.where(free, g, 0.0), 0)
        n_free += tl.sum(free.to(tl.int32), 0)
        ub = tl.minimum(ub, tl.min(tl.where(ok & (a <= 0.0), g, _INF), 0))
        lb = tl.maximum(lb, tl.max(tl.where(ok & (a >= 1.0), g, -_INF), 0))
        tl.store(alpha_out + tl.load(perm + p, mask=ok, other=0), a, mask=ok)
    _store_result(out_rho, out_it, _rho(total, n_free, ub, lb), it, timed_out, finite)


def check_device(dev: torch.device, what: str) -> None:
    """Refuse what Triton cannot run here: CPU tensors unless interpreted, device tensors if."""
    if dev.type == "cpu" and not INTERPRET:
        raise RuntimeError(
            f"the Triton OC-SVM {what} runs CPU tensors only in Triton's interpreter: set "
            "TRITON_INTERPRET=1 before triton is imported"
        )
    if dev.type != "cpu" and INTERPRET:
        raise RuntimeError(f"{dev} tensors, but the Triton {what} was loaded in interpreter mode")


def launch(
    kernel,
    problem: tuple,
    scratch: tuple[tuple[tuple[int, ...], torch.dtype], ...],
    num_warps: int,
    **size: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One launch (grid (1,)) of an SMO program, ``_smo_kernel`` or
    ``smo_triton_regs._smo_regs_kernel``, on ``problem``: :func:`_solve`'s arguments (Q, QD,
    alpha0, n_init, params, bad, max_iter, shrinking). The device check, the outputs and the
    ``scratch`` buffers ((shape, dtype) each, allocated in order after alpha), then the kernel
    called with (Q, QD, alpha0, alpha, *scratch, params, bad, rho, it, n, n_init, max_iter),
    ``SHRINK`` and the program's ``size`` constexpr, compiled without FMA contraction on
    ``num_warps`` warps.

    Returns (alpha (n,) float64, rho (1,) float64, (n_iter, timed_out, bad input) (3,) int64), on
    the device, unread (no host sync).
    """
    Q, QD, alpha0, n_init, params, bad, max_iter, shrinking = problem
    n, dev = len(QD), QD.device
    check_device(dev, "solver")
    alpha = torch.empty(n, dtype=torch.float64, device=dev)
    buffers = [torch.empty(shape, dtype=dtype, device=dev) for shape, dtype in scratch]
    rho = torch.empty(1, dtype=torch.float64, device=dev)
    it = torch.empty(3, dtype=torch.int64, device=dev)
    kw = {} if INTERPRET else {"enable_fp_fusion": False, "num_warps": num_warps}
    kernel[(1,)](
        Q,
        QD,
        alpha0,
        alpha,
        *buffers,
        params,
        bad,
        rho,
        it,
        n,
        n_init,
        max_iter,
        SHRINK=shrinking,
        **size,
        **kw,
    )
    return alpha, rho, it


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
    """One launch of the SMO program. Q (n, n) float32, QD and alpha0 (n,) float64, params (2,)
    float64 = (eps, TAU), ``bad`` (n,) float64 (nonzero or NaN: a non-finite point, then the
    program does no iteration and rho is NaN), all on one device; ``n_init``: the leading
    alphas > 0. Returns :func:`launch`'s (alpha, rho, (n_iter, timed_out, bad input)).
    """
    n = len(QD)
    scratch = (((4, n), torch.float64), ((3, n), torch.int32))  # see _smo_kernel
    problem = (Q, QD, alpha0, n_init, params, bad, max_iter, shrinking)
    block = min(triton.next_power_of_2(n), 1024)
    return launch(_smo_kernel, problem, scratch, 4 if n <= 2048 else 8, BLOCK=block)


LIB = torch.library.Library("negmine", "FRAGMENT")


def define(name: str, solve: object) -> object:
    """``solve`` (the arguments and results of :func:`_solve`) as the one op
    ``torch.ops.negmine.<name>``: the op counter and the profiler see the launch as one op (and
    nothing of what Triton's interpreter does inside it)."""
    LIB.define(
        f"{name}(Tensor Q, Tensor QD, Tensor alpha0, int n_init, Tensor params, Tensor bad,"
        " int max_iter, bool shrinking) -> (Tensor, Tensor, Tensor)"
    )
    LIB.impl(name, solve, "CompositeExplicitAutograd")
    return getattr(torch.ops.negmine, name)


solve = define("ocsvm_smo", _solve)
