"""libsvm's SMO for the one-class dual, as the engine of :mod:`negatives.ocsvm` (see its docstring).

Mirrors ``solve_one_class``, ``Solver::Solve``, ``select_working_set`` (WSS2, ties to the last
index), ``do_shrinking``/``be_shrunk``, ``reconstruct_gradient`` and ``calculate_rho`` of the libsvm
that scikit-learn 1.9.1 vendors (sklearn/svm/src/libsvm/svm.cpp). The step functions are written
once against two sets of primitives: :class:`HostOps` (numpy arrays and host scalars, the CPU loop)
and :class:`DeviceOps` (fixed-shape tensor ops in chunks with a device-side ``live`` flag, the CUDA
loop, which syncs with the host once per chunk). Imports numpy, torch and :mod:`.limits`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from negatives.ocsvm.limits import Limits

_TAU = 1e-12  # libsvm's TAU: stands in for a non-positive quadratic coefficient
_INF = math.inf


def _formula(kernel: str, gamma: float, dots: Any, xsq: Any, sq: Any, exp: Any) -> Any:
    """libsvm's kernel_rbf, exp(-gamma * (|x|^2 + |y|^2 - 2 x.y)), or x.y; numpy or torch."""
    return dots if kernel == "linear" else exp(-gamma * ((xsq + sq) - 2.0 * dots))


def _torch_formula(
    kernel: str, gamma: float, dots: torch.Tensor, xsq: torch.Tensor, sq: torch.Tensor
) -> torch.Tensor:
    """:func:`_formula` on tensors in 4 ops instead of 5: ``sub(alpha=2)`` is bit for bit the
    same, as 2 x.y is exact (fused or not, the subtraction rounds once)."""
    if kernel == "linear":
        return dots
    return torch.exp(torch.sub(xsq + sq, dots, alpha=2.0).mul_(-gamma))


def full_kernel(X: torch.Tensor, kernel: str, gamma: float, round32: bool) -> torch.Tensor:
    """Q = K(X, X) (n, n) from float64 X on X's device, float32 if ``round32`` (libsvm's Qfloat),
    in blocks of 1024 rows; no host sync (the chunked device loop's kernel; the Triton fit's is
    :func:`negatives.ocsvm.kernels_triton.gram`)."""
    sq = torch.linalg.vecdot(X, X)
    dtype = torch.float32 if round32 else torch.float64
    blocks = [
        _torch_formula(kernel, gamma, X[a : a + 1024] @ X.T, sq[a : a + 1024, None], sq)
        for a in range(0, len(X), 1024)
    ]
    return blocks[0].to(dtype) if len(blocks) == 1 else torch.cat([b.to(dtype) for b in blocks])


class Kernel:
    """Rows of Q = K(X, X) in float64, rounded through float32 for the libsvm solver (``Qfloat``).

    ``full``: the whole matrix is computed once with torch on X's device (the device loop's source).
    Otherwise rows are computed on demand with numpy and kept, like libsvm's cache. Both loops read
    the same object, so they see bit-identical kernel values.
    """

    def __init__(self, X: torch.Tensor, kernel: str, gamma: float, round32: bool, full: bool):
        self.kernel, self.gamma, self.round32, self.rows = kernel, gamma, round32, {}
        self.full = None
        if full:
            self.full = full_kernel(X, kernel, gamma, round32)
            sq = torch.linalg.vecdot(X, X).cpu().numpy()
        else:
            self.X = X.cpu().numpy()
            self.sq = sq = np.einsum("ij,ij->i", self.X, self.X)
        self.diag = sq.copy() if kernel == "linear" else np.ones_like(sq)  # QD (float64, CPU)

    def _formula(self, dots: Any, xsq: Any, sq: Any, exp: Any) -> Any:
        return _formula(self.kernel, self.gamma, dots, xsq, sq, exp)

    def row(self, i: int) -> np.ndarray:
        """Q[i, :] (n,) float64 in the original order, on the CPU."""
        r = self.rows.get(i)
        if r is None:
            if self.full is not None:
                r = self.full[i].cpu().numpy().astype(np.float64)
            else:
                dots = np.empty(len(self.X))
                for a in range(0, len(dots), 2048):  # numpy's threaded gemv (larger blocks) can
                    np.dot(self.X[a : a + 2048], self.X[i], out=dots[a : a + 2048])  # stall ms
                r = self._formula(dots, self.sq[i], self.sq, np.exp)
                r = r.astype(np.float32).astype(np.float64) if self.round32 else r
            self.rows[i] = r
        return r

    def row_t(self, idx: torch.Tensor) -> torch.Tensor:
        """Q[idx, :] (n,) float64 for a (1,) index tensor, without a host sync when ``full``."""
        if self.full is not None:
            return self.full.index_select(0, idx)[0].double()
        return torch.from_numpy(self.row(int(idx)))


class _State:
    """Solver arrays in libsvm's *position* order (shrinking swaps positions, ``perm`` maps back).

    ``up`` is +inf where alpha_t = C (it cannot increase) and ``low`` -inf where alpha_t = 0, else
    0: libsvm's ``alpha_status``, as penalties that mask G with one addition.
    """

    def __init__(self, alpha: Any, QD: Any, perm: Any, where: Any):
        self.alpha, self.QD, self.perm = alpha, QD, perm
        self.G, self.Gbar = alpha * 0.0, alpha * 0.0  # gradient, and its part from alpha_i = C
        self.up, self.low = where(alpha >= 1.0, _INF, self.G), where(alpha <= 0.0, -_INF, self.G)
        self.l = self.A = len(alpha)  # problem size, active size
        self.identity = True  # perm is the identity (no swap yet)
        self.unshrink = False

    def permute(self, idx: Any) -> None:
        for name in ("alpha", "G", "Gbar", "QD", "perm", "up", "low"):
            setattr(self, name, getattr(self, name)[idx])
        self.identity = False


class HostOps:
    """Primitives of the step functions on numpy arrays and Python scalars (the CPU loop)."""

    def __init__(self, kernel: Kernel):
        self.kernel, self.n_syncs, self.quads = kernel, 0, {}
        self.QD = kernel.diag

    def init(self, alpha: np.ndarray) -> _State:
        return _State(alpha.copy(), self.QD, np.arange(len(alpha)), np.where)

    def row(self, s: _State, i: int) -> np.ndarray:
        r = self.kernel.row(int(s.perm[i]))
        return r[: s.A] if s.identity else r.take(s.perm[: s.A])

    def row_full(self, s: _State, i: int) -> np.ndarray:
        r = self.kernel.row(int(s.perm[i]))
        return r if s.identity else r.take(s.perm)

    def quad(self, s: _State, i: int, Qi: np.ndarray) -> np.ndarray:
        """WSS2's QD_i + QD_j - 2 Q_ij over the active j (TAU if <= 0), cached per row."""
        o = int(s.perm[i])
        q = self.quads.get(o)
        if q is None:
            QDo = 2.0 if self.kernel.kernel == "rbf" else self.QD[o] + self.QD  # QD = 1 for rbf
            q = QDo - 2.0 * self.kernel.row(o)
            q = self.quads[o] = np.where(q > 0, q, _TAU)
        return q[: s.A] if s.identity else q.take(s.perm[: s.A])

    @staticmethod
    def active(s: _State, x: np.ndarray) -> np.ndarray:
        return x[: s.A]

    @staticmethod
    def mask(s: _State, m: np.ndarray) -> np.ndarray:
        return m

    @staticmethod
    def masked(s: _State, x: np.ndarray, fill: float) -> np.ndarray:
        return x

    @staticmethod
    def relu(x: np.ndarray) -> np.ndarray:
        return np.maximum(x, 0.0)

    @staticmethod
    def max(x: np.ndarray) -> float:
        return float(np.maximum.reduce(x))

    @staticmethod
    def max_last(x: np.ndarray) -> tuple[float, int]:
        """The max of x and the LAST index reaching it (libsvm compares with >=)."""
        v = x[::-1]
        k = int(v.argmax())
        return float(v[k]), len(v) - 1 - k

    @staticmethod
    def min_last(x: np.ndarray) -> tuple[float, int]:
        v = x[::-1]
        k = int(v.argmin())
        return float(v[k]), len(v) - 1 - k

    @staticmethod
    def where(c: Any, a: Any, b: Any) -> Any:
        return a if c else b

    @staticmethod
    def vwhere(c: np.ndarray, a: Any, b: Any) -> np.ndarray:
        return np.where(c, a, b)

    @staticmethod
    def take(x: np.ndarray, i: int) -> float:
        return float(x[i])

    @staticmethod
    def put(x: np.ndarray, i: int, v: float) -> None:
        x[i] = v

    @staticmethod
    def pen(c: bool, v: float) -> float:
        return v if c else 0.0

    @staticmethod
    def add_g(s: _State, Qi: np.ndarray, dai: float, Qj: np.ndarray, daj: float) -> None:
        s.G[: s.A] += Qi * dai + Qj * daj

    def add_gbar(self, s: _State, p: int, Qp: np.ndarray, coef: float) -> None:
        if coef:
            s.Gbar += coef * self.row_full(s, p)

    def host(self, x: Any) -> Any:
        return x

    def nonzero(self, m: np.ndarray) -> list[int]:
        return np.flatnonzero(m).tolist()

    def run(self, s: _State, steps: int, eps: float) -> tuple[int, bool]:
        """Up to ``steps`` SMO iterations; returns (iterations done, stopped by the WSS)."""
        for t in range(steps):
            i, j, stop, Qi = _select(self, s, eps)
            if stop:
                return t, True
            _update(self, s, i, j, Qi, True)
        return steps, False


class DeviceOps(HostOps):
    """The same primitives as fixed-shape tensor ops: no host sync inside a chunk of iterations."""

    def __init__(self, kernel: Kernel, device: torch.device):
        self.kernel, self.n_syncs, self.dev = kernel, 0, device

    def init(self, alpha: np.ndarray) -> _State:
        a = torch.as_tensor(alpha, dtype=torch.float64, device=self.dev)
        QD = torch.as_tensor(self.kernel.diag, device=self.dev)
        return _State(a, QD, torch.arange(len(a), device=self.dev), torch.where)

    def row(self, s: _State, i: Any) -> torch.Tensor:
        r = self.kernel.row_t(
            s.perm[i : i + 1] if isinstance(i, int) else s.perm.index_select(0, i)
        )
        return r.to(self.dev) if s.identity else r.to(self.dev).index_select(0, s.perm)

    row_full = row

    def quad(self, s: _State, i: torch.Tensor, Qi: torch.Tensor) -> torch.Tensor:
        q = (s.QD.index_select(0, i) + s.QD) - 2.0 * Qi
        return torch.where(q > 0, q, _TAU)

    def _valid(self, s: _State) -> torch.Tensor:
        return torch.arange(s.l, device=self.dev) < s.A

    @staticmethod
    def active(s: _State, x: torch.Tensor) -> torch.Tensor:
        return x

    def mask(self, s: _State, m: torch.Tensor) -> torch.Tensor:
        return m if s.A == s.l else m & self._valid(s)

    def masked(self, s: _State, x: torch.Tensor, fill: float) -> torch.Tensor:
        return x if s.A == s.l else torch.where(self._valid(s), x, fill)

    @staticmethod
    def relu(x: torch.Tensor) -> torch.Tensor:
        return x.clamp_min(0.0)

    @staticmethod
    def max(x: torch.Tensor) -> torch.Tensor:
        return x.max().reshape(1)

    @staticmethod
    def max_last(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v = x.flip(0)
        k = v.argmax().reshape(1)  # the first maximum of the flipped vector
        return v.index_select(0, k), (len(v) - 1) - k

    @staticmethod
    def min_last(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v = x.flip(0)
        k = v.argmin().reshape(1)
        return v.index_select(0, k), (len(v) - 1) - k

    @staticmethod
    def where(c: Any, a: Any, b: Any) -> Any:
        return (a if c else b) if isinstance(c, bool) else torch.where(c, a, b)

    @staticmethod
    def vwhere(c: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
        return torch.where(c, a, b)

    @staticmethod
    def take(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return x.index_select(0, i)

    @staticmethod
    def put(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> None:
        x.index_copy_(0, i, v)

    @staticmethod
    def pen(c: torch.Tensor, v: float) -> torch.Tensor:
        return torch.where(c, v, 0.0).double()

    def add_g(self, s: _State, Qi: torch.Tensor, dai: Any, Qj: torch.Tensor, daj: Any) -> None:
        d = Qi * dai + Qj * daj
        s.G += d if s.A == s.l else torch.where(self._valid(s), d, 0.0)

    def add_gbar(self, s: _State, p: Any, Qp: torch.Tensor, coef: Any) -> None:
        s.Gbar += coef * Qp  # coef is 0 unless alpha_p reached or left C

    def host(self, x: torch.Tensor) -> Any:
        self.n_syncs += 1  # a CPU-GPU sync point
        return x.tolist() if x.numel() > 1 else x.item()

    def nonzero(self, m: torch.Tensor) -> list[int]:
        self.n_syncs += 1
        return np.flatnonzero(m.cpu().numpy()).tolist()  # one copy (nonzero + tolist: two)

    def run(self, s: _State, steps: int, eps: float) -> tuple[int, bool]:
        live = torch.ones(1, dtype=torch.bool, device=self.dev)
        done = torch.zeros(1, dtype=torch.long, device=self.dev)
        for _ in range(steps):
            i, j, stop, Qi = _select(self, s, eps)
            live = live & ~stop  # once the WSS stops, the later updates are no-ops (delta = 0)
            _update(self, s, i, j, Qi, live)
            done += live
        n_done, alive = self.host(torch.cat([done, live.long()]))  # the chunk's convergence check
        return n_done, not alive


def _select(o: HostOps, s: _State, eps: float) -> tuple[Any, Any, Any, Any]:
    """``Solver::select_working_set`` (WSS2) with y = +1: i, j, the stop flag, and the row Q_i."""
    G = o.active(s, s.G)
    Gmin, i = o.min_last(o.masked(s, G + o.active(s, s.up), _INF))  # i: max -G_t, alpha_t < C
    Qi = o.row(s, i)
    gd = o.masked(s, G + o.active(s, s.low), -_INF) - Gmin  # Gmax + G_t where alpha_t > 0
    m = o.relu(gd)  # only gd > 0 may be picked; their m * m / quad is > 0, the others' is 0
    best, j = o.max_last(m * m / o.quad(s, i, Qi))  # min of -(gd^2)/quad, the last index
    # max(gd) is exactly Gmax + Gmax2 (x - Gmin rounds monotonically); < eps also covers no j
    return i, j, o.max(gd) < eps, Qi


def _update(o: HostOps, s: _State, i: Any, j: Any, Qi: Any, live: Any) -> None:
    """The two-variable step of ``Solver::Solve`` for y_i == y_j and C = 1, with its clipping."""
    Qj = o.row(s, j)
    ai, aj = o.take(s.alpha, i), o.take(s.alpha, j)
    quad = (o.take(s.QD, i) + o.take(s.QD, j)) - 2.0 * o.take(Qi, j)
    quad = o.where(quad > 0, quad, _TAU)
    delta = o.where(live, (o.take(s.G, i) - o.take(s.G, j)) / quad, 0.0)
    tot = ai + aj
    ni, nj = ai - delta, aj + delta
    c = tot > 1.0
    hit = o.where(c, ni > 1.0, nj < 0.0)  # clip alpha_i at C, or alpha_j at 0
    ni, nj = o.where(hit, o.where(c, 1.0, tot), ni), o.where(hit, o.where(c, tot - 1.0, 0.0), nj)
    hit = o.where(c, nj > 1.0, ni < 0.0)  # clip alpha_j at C, or alpha_i at 0
    ni, nj = o.where(hit, o.where(c, tot - 1.0, 0.0), ni), o.where(hit, o.where(c, 1.0, tot), nj)
    o.add_g(s, Qi, ni - ai, Qj, nj - aj)
    for p, v in ((i, ni), (j, nj)):
        o.put(s.alpha, p, v)
        o.put(s.up, p, o.pen(v >= 1.0, _INF))
        o.put(s.low, p, o.pen(v <= 0.0, -_INF))
    o.add_gbar(s, i, Qi, (ni >= 1.0) * 1.0 - (ai >= 1.0) * 1.0)
    o.add_gbar(s, j, Qj, (nj >= 1.0) * 1.0 - (aj >= 1.0) * 1.0)


def _reconstruct(o: HostOps, s: _State) -> None:
    """``reconstruct_gradient``: G of shrunk variables from G_bar and the free ones, in order."""
    A = s.A
    if A == s.l:
        return
    s.G[A:] = s.Gbar[A:] + 0.0
    for p in o.nonzero((s.alpha[:A] > 0.0) & (s.alpha[:A] < 1.0)):
        s.G[A:] += s.alpha[p] * o.row_full(s, p)[A:]


def _shrink(o: HostOps, s: _State, eps: float) -> None:
    """``do_shrinking``: drop the bound variables that cannot move, with libsvm's exact swaps."""
    G, a = o.active(s, s.G), o.active(s, s.alpha)
    Gmax1 = -o.min_last(o.vwhere(o.mask(s, a < 1.0), G, _INF))[0]
    Gmax2 = o.max(o.vwhere(o.mask(s, a > 0.0), G, -_INF))
    if not s.unshrink and o.host(Gmax1 + Gmax2 <= eps * 10):
        s.unshrink = True
        _reconstruct(o, s)
        s.A = s.l
    G, a = s.G[: s.A], s.alpha[: s.A]
    out = ((a >= 1.0) & (-G > Gmax1)) | ((a <= 0.0) & (G > Gmax2))  # be_shrunk
    left = o.nonzero(out)
    keep = s.A - len(left)
    # libsvm walks i upwards and swaps every shrunk i below ``keep`` with the last kept position
    left = [p for p in left if p < keep]
    right = [p + keep for p in o.nonzero(~out[keep:])][::-1]
    if left:
        idx = np.arange(s.l)
        idx[left], idx[right] = right, left
        s.permute(idx if isinstance(s.G, np.ndarray) else torch.as_tensor(idx, device=s.G.device))
    s.A = keep


def solve(
    o: HostOps, alpha: np.ndarray, eps: float, limits: Limits, shrinking: bool, chunk: int
) -> tuple[_State, int, str]:
    """``Solver::Solve`` for the one-class problem (p = 0, y = +1, C = 1); the reason a cap of
    ``limits`` stopped it, or ""."""
    s = o.init(alpha)
    for i in np.flatnonzero(alpha > 0).tolist():  # initial gradient, summed in libsvm's order
        Qi = o.row_full(s, i)
        s.G += float(alpha[i]) * Qi
        if alpha[i] >= 1.0:
            s.Gbar += Qi
    it, counter, max_iter = 0, min(s.l, 1000) + 1, limits.max_iter
    while not (why := limits.reached(it)):  # between chunks: no host sync of its own
        counter -= 1
        if counter == 0:
            counter = min(s.l, 1000)
            if shrinking:
                _shrink(o, s, eps)
        # this iteration and up to chunk - 1 more that neither shrink nor reach max_iter
        steps = 1 + max(0, min(chunk - 1, counter - 1, max_iter - it - 1))
        done, stopped = o.run(s, steps, eps)
        it += done
        counter -= done if stopped else done - 1
        if stopped:  # optimal on the active set: unshrink everything and check again
            _reconstruct(o, s)
            s.A = s.l
            i, j, stop, Qi = _select(o, s, eps)
            if o.host(stop):
                break
            counter = 1  # shrink at the next iteration
            it += 1
            _update(o, s, i, j, Qi, True)
    return s, it, why


def rho(G: np.ndarray, a: np.ndarray) -> float:
    """``calculate_rho`` (y = +1): mean gradient of the free alphas, else the bounds' midpoint."""
    free = (a > 0.0) & (a < 1.0)
    if free.any():
        return float(np.cumsum(G[free])[-1] / free.sum())  # a sequential sum, as libsvm's
    ub = G[a <= 0.0].min(initial=_INF)
    lb = G[a >= 1.0].max(initial=-_INF)
    return float((ub + lb) / 2)


def initial_alpha(nu: float, n: int) -> np.ndarray:
    """``solve_one_class`` in scikit-learn's copy: alphas at C = 1 until they sum to nu * n."""
    nu_l = float(np.cumsum(np.full(n, nu))[-1])  # accumulated as libsvm does, not nu * n
    alpha = np.zeros(n)
    for i in range(n):
        if nu_l <= 0:
            break
        alpha[i] = min(1.0, nu_l)
        nu_l -= alpha[i]
    return alpha
