"""One-class SVM on torch tensors, step for step the solver of scikit-learn's ``OneClassSVM``.

    clf = OneClassSVM(nu=0.01, gamma=0.01).fit(torch.cat([q, k]))  # (2N, D) -> fitted
    inliers = queue[clf.decision_function(queue) > 0]  # (K, D) -> f (K,), float64

MiOC [0] refits ``sklearn.svm.OneClassSVM(kernel="rbf", nu=0.01, gamma=0.01)`` on ``cat(q, k)`` at
every step and keeps the queue entries whose decision value is > 0. The one-class dual [2] (with
libsvm's scaling) and the decision function are::

    min_a 1/2 a^T Q a   s.t.  0 <= a_i <= 1,  sum_i a_i = nu * n,     Q_ij = K(x_i, x_j)
    f(y) = sum_i a_i K(x_i, y) - rho,      K = exp(-gamma |x - y|^2) ("rbf") or x . y ("linear")

With gamma = 0.01 on unit vectors K lies in [0.961, 1] and most |f| are below libsvm's tolerance,
so *which* queue points are inliers is decided by where the solver stops, not by the optimum.
``solver="libsvm"`` therefore follows libsvm's SMO [1, 3] exactly: scikit-learn's start (alphas set
to 1 in order until they sum to nu * n, accumulated as n additions of nu), second-order working
set selection (WSS2) with its tie-breaking, the two-variable update and its clipping, shrinking
with its index swaps, the stopping rule ``Gmax + Gmax2 < tol``, rho, and kernel values rounded to
float32 as in libsvm's ``Qfloat`` cache. It gives scikit-learn's ``n_iter_``, support vectors and
dual coefficients bit for bit on the tested data, hence its inlier set.

Implementation based on [1]: ``solve_one_class``, ``Solver::Solve``, ``select_working_set``,
``do_shrinking``/``be_shrunk``, ``reconstruct_gradient``, ``calculate_rho``, ``predict_values``.
The step functions are written once against two small sets of primitives: numpy arrays with host
scalars (the CPU loop: torch's per-op overhead would dominate millisecond fits) and fixed-shape
tensor ops (the CUDA loop: chunks of ``chunk_size`` iterations with a device-side ``live`` flag
that freezes the state once the stopping rule fires, so the host syncs once per chunk).

On CUDA the default ``loop="triton"`` runs the same SMO (shrinking included) as ONE Triton program
(:mod:`negatives.ocsvm.smo_triton`) after ONE Triton launch for the kernel matrix, and scores with
ONE more (:mod:`negatives.ocsvm.kernels_triton`): no host sync in ``fit`` or ``decision_function``,
a launch count independent of the iteration count (``loop="triton_regs"``, n <= 1,024: the same
with the solver's state in registers, :mod:`negatives.ocsvm.smo_triton_regs`). Its result stays on
the device: the dual is kept dense (alpha for every fitted point, zeros included),
``intercept_``/``offset_`` are device tensors, and the scikit-learn attributes that need the host
(``support_``, ``dual_coef_``, ``n_iter_``, ...) are read from the device on first access (one
sync). Non-finite input is not checked on the host there: the solver does no iteration, rho
becomes NaN (every decision value NaN, so no inliers), ``nonfinite_`` (0-dim int64, 1) flags it,
and reading a host attribute raises the CPU path's error.

NOTE: ``solver="exact"`` deviates from the paper (which used scikit-learn): the same SMO on float64
kernel values with tolerance ``min(tol, 1e-10)`` reaches the optimum of the dual, so its inlier set
can differ from scikit-learn's.
NOTE: ``max_iter=-1`` caps the iterations at ``max(10**7, 100 * n)`` as upstream libsvm >= 3.3 does;
scikit-learn's copy has no cap (this only matters past 10^7 iterations).
NOTE: ``decision_function`` does not check its input for NaN (a NaN row scores NaN, predicted -1).

- [0] Jain et al., "One-Class SVM-guided Negative Sampling for Enhanced Contrastive Learning",
  NLDL 2025. https://proceedings.mlr.press/v265/jain25a.html
- [1] libsvm as vendored in scikit-learn 1.9.1: https://github.com/scikit-learn/scikit-learn/blob/
  1.9.1/sklearn/svm/src/libsvm/svm.cpp
- [2] Schoelkopf et al., "Estimating the Support of a High-Dimensional Distribution", Neural
  Computation 13(7), 2001.
- [3] Fan, Chen, Lin, "Working Set Selection Using Second Order Information for Training Support
  Vector Machines", JMLR 6, 2005. https://www.jmlr.org/papers/v6/fan05a.html

Shapes: ``fit(X)`` with X (n, d); ``decision_function(Y)`` with Y (m, d) -> (m,) float64 on Y's
device; ``predict(Y)`` -> (m,) int64 in {+1, -1}.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from negatives.ocsvm import device_support as support
from negatives.ocsvm import smo
from negatives.ocsvm.limits import Limits, warn_once

_TRITON_LOOPS = ("triton", "triton_regs")  # the loops that fit in one Triton program
_INFINITE_RHO = "rho is infinite: every alpha is at its bound (nu * n = n); use nu < 1"
_HOST_ATTRS = ("support_", "support_vectors_", "dual_coef_", "n_support_", "n_iter_", "fit_status_")


class OneClassSVM:
    """One-class SVM [2] on torch tensors with scikit-learn's interface, solved as libsvm does [1].

    Fitted attributes, named as in scikit-learn and on the input's device: ``support_`` (n_SV,)
    int64, ``support_vectors_`` (n_SV, d) float64, ``dual_coef_`` (1, n_SV) float64,
    ``intercept_`` = -rho and ``offset_`` = rho, both (1,) float64, ``n_support_`` (1,) int32,
    ``n_iter_`` (int; -1 from thundersvm), ``fit_status_`` (1 if max_iter stopped the solver) and
    ``n_syncs_``, the host syncs of the device loop (its convergence checks).
    """

    def __init__(
        self,
        *,
        nu: float = 0.01,
        gamma: float = 0.01,
        kernel: str = "rbf",
        tol: float = 1e-3,
        max_iter: int = -1,
        solver: str = "libsvm",
        backend: str = "torch",
        shrinking: bool = True,
        loop: str = "auto",
        chunk_size: int = 32,
        kernel_cache: str = "auto",
        max_seconds: float | None = None,
        should_stop: Callable[[], bool] | None = None,
    ):
        """Validate and store the settings.

        Args:
            nu: upper bound on the fraction of outliers and lower bound on the fraction of support
                vectors, in (0, 1].
            gamma: RBF width, > 0 (unused by the linear kernel).
            kernel: "rbf" (exp(-gamma |x - y|^2)) or "linear" (x . y).
            tol: stopping tolerance of the solver (libsvm's eps).
            max_iter: iteration cap; -1 for max(10^7, 100 n).
            solver: "libsvm" (scikit-learn's iterates exactly) or "exact" (the dual's optimum).
            backend: "torch" (this module), or "sklearn" / "thundersvm" wrapped behind this API.
            shrinking: libsvm's shrinking heuristic (on in scikit-learn).
            loop: "auto" ("triton" on CUDA, "host" on CPU), "host" (numpy on the CPU), "triton"
                (the Gram kernel, then the whole SMO in one Triton program, no host sync; CPU
                tensors need TRITON_INTERPRET=1 set before triton is imported), "triton_regs" (the
                same, state in registers; n > 1,024 runs "triton", warned once) or "device"
                (chunks of tensor ops, one host sync per chunk; also runs on CPU).
            chunk_size: iterations per host sync in the device loop.
            kernel_cache: "auto" ("full" on CUDA, else "rows"), "full" (the n x n float32 kernel
                computed once with torch, 4 n^2 bytes) or "rows" (rows computed on the CPU when
                first needed and kept, like libsvm's cache).
            max_seconds, should_stop: the host and device loops also stop after ``max_seconds``
                of wall clock, or when ``should_stop()`` turns true in a solve past 1 s
                (:mod:`negatives.ocsvm.limits`); each cap warns once per object.
        """
        for name, value, valid in (
            ("kernel", kernel, ("rbf", "linear")),
            ("solver", solver, ("libsvm", "exact")),
            ("backend", backend, ("torch", "sklearn", "thundersvm")),
            ("loop", loop, ("auto", "host", "device", *_TRITON_LOOPS)),
            ("kernel_cache", kernel_cache, ("auto", "full", "rows")),
        ):
            if value not in valid:
                raise ValueError(f"unknown {name} {value!r}; expected one of {valid}")
        if not 0.0 < nu <= 1.0:
            raise ValueError(f"nu must be in (0, 1], got {nu}")
        if not 0.0 < gamma < math.inf:
            raise ValueError(f"gamma must be > 0 and finite, got {gamma}")
        if not 0.0 < tol < math.inf:
            raise ValueError(f"tol must be > 0 and finite, got {tol}")
        if max_iter < -1 or chunk_size < 1:
            raise ValueError(
                f"need max_iter >= -1 and chunk_size >= 1, got {max_iter}, {chunk_size}"
            )
        if solver == "exact" and backend != "torch":
            raise ValueError("solver='exact' needs backend='torch'")
        if loop in _TRITON_LOOPS and (solver != "libsvm" or backend != "torch"):
            raise ValueError(f"loop={loop!r} runs solver='libsvm' with backend='torch' only")
        if backend == "thundersvm":  # at construction, not at the first fit (after warm-up)
            support.thundersvm()
        self.nu, self.gamma, self.kernel, self.tol, self.max_iter = nu, gamma, kernel, tol, max_iter
        self.solver, self.backend, self.shrinking = solver, backend, shrinking
        self.loop, self.chunk_size, self.kernel_cache = loop, chunk_size, kernel_cache
        self.max_seconds, self.should_stop, self.stopped_by_ = max_seconds, should_stop, ""
        self._wrapped: Any = None
        self._triton_state = "untried"  # "untried" | "ok" | the cause of the fallback
        self.path_ = ""  # the latest fit's loop: a Triton loop, "device", "host" or the backend

    def fit(self, X: torch.Tensor) -> OneClassSVM:
        """Fit on X (n, d), n >= 2, finite; returns self."""
        X = torch.as_tensor(X)
        if X.ndim != 2 or len(X) < 2 or X.shape[1] < 1:
            raise ValueError(f"X must be (n, d) with n >= 2 points, got shape {tuple(X.shape)}")
        X64 = X.detach().to(torch.float64)  # scikit-learn hands libsvm float64 data
        self.__dict__.pop("_pending", None)
        if self.backend == "torch" and self.solver == "libsvm" and self._loop(X64) in _TRITON_LOOPS:
            fitted = self._fit_triton(X64)
            if fitted is not None:
                return fitted
        cpu = X64.device.type == "cpu"
        if not (np.isfinite(X64.numpy()).all() if cpu else torch.isfinite(X64).all()):
            raise ValueError("X contains NaN or infinite values")
        fit = self._fit_torch if self.backend == "torch" else self._fit_wrapped
        self.path_ = self._loop(X64) if self.backend == "torch" else self.backend
        alpha, rho, n_iter, status = fit(X64)
        if not math.isfinite(rho):
            raise ValueError(_INFINITE_RHO)
        sv, dev = np.flatnonzero(alpha), X.device
        self._d = X.shape[1]
        self.support_ = torch.from_numpy(sv).to(dev)
        self.support_vectors_ = X64.index_select(0, self.support_)
        self.dual_coef_ = torch.from_numpy(alpha[None, sv]).to(dev)
        self.intercept_ = torch.tensor([-rho if rho else 0.0], dtype=torch.float64, device=dev)
        self.offset_ = torch.tensor([rho], dtype=torch.float64, device=dev)
        self.n_support_ = torch.tensor([len(sv)], dtype=torch.int32, device=dev)
        self.n_iter_, self.fit_status_ = int(n_iter), int(status)
        self._sv, self._coef, self._dense = self.support_vectors_, self.dual_coef_[0], False
        self._sv_sq = None  # |sv|^2, computed by decision_function
        stats = (float(n_iter), float(len(sv)), float(status))
        self._stats = dict(zip(("solver_iterations", "support_vectors", "max_iter_reached"), stats))
        self.nonfinite_ = self._constant(dev, "zero", 0)[0]  # checked above
        warn_once(self, self.stopped_by_, n_iter, self.max_seconds, level=2)
        return self

    def _loop(self, X: torch.Tensor) -> str:
        """The loop that fits X: ``loop``, or for "auto" the device's default; "device" in place
        of a Triton loop after a fallback (:meth:`_fall_back`)."""
        loop = self.loop
        if loop == "auto":
            cuda, triton = X.is_cuda, support.has_triton()
            loop = "triton" if cuda and triton else "device" if cuda else "host"
        fell_back = self._triton_state not in ("untried", "ok")
        return "device" if loop in _TRITON_LOOPS and fell_back else loop

    def _fall_back(self, cause: str) -> None:
        """After a failed first Triton fit: the device loop from now on, with one warning."""
        self._triton_state = cause
        warnings.warn(
            f"the Triton OC-SVM cannot run here ({cause}); fitting with the device loop instead "
            f"(the same iterates, one host sync per {self.chunk_size} iterations). The loop is "
            "chosen by OneClassSVM(loop=...), for MiOC the setting negatives.kwargs.loop "
            "(auto, triton, device, host)",
            RuntimeWarning,
            stacklevel=3,
        )

    def _fit_triton(self, X64: torch.Tensor) -> OneClassSVM | None:
        """The fit as two Triton launches (the Gram matrix, the SMO program); nothing is read on
        the host (see the module doc). At the first Triton fit of this object, a triton older
        than ``support.TRITON_MIN``, or a kernel that fails to compile or launch, makes this and
        every later fit use the device loop (one warning naming the cause): returns None then."""
        first = self._triton_state == "untried"
        if first and (cause := support.triton_unusable()):
            self._fall_back(cause)
            return None
        try:
            out = self._launch_triton(X64)
        except Exception as e:  # noqa: BLE001  (any failure of the backend, at the first fit only)
            if not first or isinstance(e, ValueError):
                raise
            self._fall_back(support.first_line(e))
            return None
        self._triton_state = "ok"  # path_: set by _launch_triton
        return out

    def _launch_triton(self, X64: torch.Tensor) -> OneClassSVM:
        from negatives.ocsvm import kernels_triton, smo_triton, smo_triton_regs

        n, dev = len(X64), X64.device
        regs = self._loop(X64) == "triton_regs" and smo_triton_regs.takes(n, self.__dict__)
        alpha0, n_init = self._constant(dev, "alpha0", n)
        if n_init == n and self.nu * n >= n:  # every alpha at C: known from (nu, n) alone
            raise ValueError(_INFINITE_RHO)
        gamma = self._constant(dev, "gamma", 0)[0]
        # Q (float32), |x|^2 and the input check (x * 0 summed per point: 0, or NaN for a NaN or
        # infinite x) in one launch; on bad input the solver does nothing and rho is NaN
        Q, sq, bad = kernels_triton.gram(X64, gamma, self.kernel == "linear")
        QD = sq if self.kernel == "linear" else self._constant(dev, "ones", n)[0]
        params, _ = self._constant(dev, "params", 0)
        max_iter = max(10**7, 100 * n) if self.max_iter == -1 else self.max_iter
        solve = (smo_triton_regs if regs else smo_triton).solve
        alpha, rho, it = solve(Q, QD, alpha0, n_init, params, bad, max_iter, self.shrinking)
        self._d, self.n_syncs_, self.nonfinite_ = X64.shape[1], 0, it[2]
        self.stopped_by_ = ""  # "max_iter" once the host attributes are read (_materialize)
        self._sv, self._coef, self._dense, self._sv_sq = X64, alpha, True, sq  # zeros add 0 to f
        self.offset_, self.path_ = rho, "triton_regs" if regs else "triton"
        self._pending = (alpha, it)
        for name in (*_HOST_ATTRS, "intercept_"):  # intercept_: from offset_ on first access
            self.__dict__.pop(name, None)
        self._stats = None  # fit_stats() reads them from _pending's device tensors
        return self

    def _constant(self, dev: torch.device, what: str, n: int) -> tuple[torch.Tensor, int]:
        """Per-device constants of the Triton fit: the initial alpha for (nu, n), ones(n), (eps,
        TAU), 0, gamma. Built once per (device, n) by :meth:`prepare` (MiOC calls it at setup and
        at ``.to()``), else on first use; from tensor ops on the device either way (no host data
        copied: on CUDA that copy would wait for the GPU)."""
        cache = self.__dict__.setdefault("_constants", {})
        key = (what, n, str(dev))
        if key not in cache:
            cache[key] = support.fit_constant(what, n, dev, self.nu, self.gamma, self.tol)
        return cache[key]

    def prepare(self, device: torch.device | str, n: int) -> None:
        """Build the Triton fit's constants for ``n`` points on ``device`` now, outside any
        training step (:meth:`_constant`)."""
        dev = torch.device(device)
        for what, size in (("alpha0", n), ("ones", n), ("zero", 0), ("gamma", 0), ("params", 0)):
            self._constant(dev, what, size)

    def _materialize(self) -> None:
        """The scikit-learn attributes of a Triton fit, read from the device in one copy."""
        alpha_t, it_t = self._triton_result = self.__dict__.pop("_pending")
        host = torch.cat([alpha_t, it_t.double()]).cpu().numpy()
        alpha, (n_iter, status, bad) = host[:-3], host[-3:].astype(np.int64)
        if bad:
            raise ValueError("X contains NaN or infinite values")
        dev, sv = alpha_t.device, np.flatnonzero(alpha)
        self.support_ = torch.from_numpy(sv).to(dev)
        self.support_vectors_ = self._sv.index_select(0, self.support_)
        self.dual_coef_ = torch.from_numpy(alpha[None, sv]).to(dev)
        self.n_support_ = torch.tensor([len(sv)], dtype=torch.int32, device=dev)
        self.n_iter_, self.fit_status_ = int(n_iter), int(status)
        self.stopped_by_ = "max_iter" if status else ""
        warn_once(self, self.stopped_by_, int(n_iter), None, level=3)

    def __getattr__(self, name: str) -> Any:
        """Host attributes of a Triton fit, materialised on first access (one host sync)."""
        if name in _HOST_ATTRS and "_pending" in self.__dict__:
            self._materialize()
            return self.__dict__[name]
        if name == "intercept_" and self.__dict__.get("_dense"):  # a Triton fit, on the device
            rho = self.offset_
            self.intercept_ = torch.where(rho != 0, -rho, 0.0)
            return self.intercept_
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def fit_stats(self) -> dict[str, torch.Tensor | float]:
        """Solver iterations, support-vector count (and, on the Triton path, whether max_iter
        stopped it) without a host sync on the Triton path: device tensors there, floats else."""
        if self._stats is None:  # a Triton fit: computed on request, not in every fit
            alpha, it = self.__dict__.get("_pending") or self._triton_result
            self._stats = {
                "solver_iterations": it[0].double(),
                "support_vectors": (alpha > 0).sum().double(),
                "max_iter_reached": it[1].double(),
            }
        return dict(self._stats)

    def _fit_torch(self, X64: torch.Tensor) -> tuple[np.ndarray, float, int, int]:
        n = len(X64)
        device_loop = self._loop(X64) == "device"
        X64 = X64 if device_loop else X64.cpu()
        cache = (
            self.kernel_cache if self.kernel_cache != "auto" else "full" if X64.is_cuda else "rows"
        )
        if cache == "rows" and device_loop and X64.is_cuda:
            raise ValueError("kernel_cache='rows' computes on the CPU; use 'full' on CUDA")
        kernel = smo.Kernel(X64, self.kernel, self.gamma, self.solver == "libsvm", cache == "full")
        ops = smo.DeviceOps(kernel, X64.device) if device_loop else smo.HostOps(kernel)
        eps = self.tol if self.solver == "libsvm" else min(self.tol, 1e-10)
        max_iter = max(10**7, 100 * n) if self.max_iter == -1 else self.max_iter
        chunk = self.chunk_size if device_loop else n + 1000  # host: no chunk boundary needed
        limits = Limits(max_iter, self.max_seconds, self.should_stop)
        s, n_iter, self.stopped_by_ = smo.solve(
            ops, smo.initial_alpha(self.nu, n), eps, limits, self.shrinking, chunk
        )
        G, a, perm = support.solution_to_host(s.G, s.alpha, s.perm)
        self.n_syncs_ = ops.n_syncs + device_loop  # + this copy of the solution to the host
        alpha = np.zeros(n)
        alpha[perm] = a  # libsvm's "put back the solution"
        return alpha, smo.rho(G[: s.A], a[: s.A]), n_iter, int(bool(self.stopped_by_))

    def _fit_wrapped(self, X64: torch.Tensor) -> tuple[np.ndarray, float, int, int]:
        kw = dict(kernel=self.kernel, nu=self.nu, gamma=self.gamma, tol=self.tol)
        kw.update(max_iter=self.max_iter, shrinking=self.shrinking)
        self._wrapped, *fitted = support.fit_wrapped(self.backend, X64.cpu().numpy(), kw)
        self.n_syncs_, self.stopped_by_ = 0, "max_iter" if fitted[3] else ""
        return tuple(fitted)  # type: ignore[return-value]

    def decision_function(self, Y: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
        """f(y) = sum_i a_i K(sv_i, y) - rho for Y (m, d): float64 (m,) on Y's device.

        Like libsvm's ``predict_values`` with double kernel values: one batched float64 kernel
        evaluation per chunk of rows of Y, exp(-g |sv|^2 + 2 g sv.y - g |y|^2) with the matmul
        2 g sv.y, into scratch buffers kept between calls (on a VM, faulting in fresh pages
        costs as much as the arithmetic). On the CPU, unless an exponent could overflow
        (2 g max(|sv|^2, |y|^2) >= 700), the three factors are exponentiated apart:
        exp(-g |sv|^2) goes into a_i and exp(-g |y|^2) scales the sum (a few ulp of error).
        """
        Y = self._check(Y)
        if self.backend == "sklearn":
            f = self._wrapped.decision_function(Y.cpu().double().numpy())
            return torch.as_tensor(f, device=Y.device)
        if self._fused_scoring(Y):
            return self._score_triton(Y)[0]
        sv, a = self._sv.to(Y.device), self._coef.to(Y.device)
        out = torch.empty(len(Y), dtype=torch.float64, device=Y.device)
        chunk = chunk or (1 << 15 if Y.is_cuda else 2048)  # CPU: a chunk stays in the L2 cache
        sv_sq = self._sv_sq if self._sv_sq is not None else torch.linalg.vecdot(sv, sv)
        g, sv_sq, n_sv, d = self.gamma, sv_sq.to(Y.device), len(sv), Y.shape[1]
        W = (2.0 * g) * sv  # (n_SV, d)
        sv_r2 = math.inf if Y.is_cuda or self._dense else float(sv_sq.max())  # no sync there
        a_sv = a * torch.exp(-g * sv_sq) if sv_r2 < math.inf else None  # (n_SV,), CPU only
        y_buf, E_buf = support.scratch(self.__dict__, Y.device, chunk * d, chunk * n_sv)
        for k in range(0, len(Y), chunk):
            o = out[k : k + chunk]  # (b,)
            y = y_buf[: len(o) * d].view(len(o), d).copy_(Y[k : k + chunk])  # float64
            if self.kernel == "linear":
                torch.mv(y, sv.T @ a, out=o)
                continue
            y_sq = torch.linalg.vector_norm(y, dim=1).square_()  # (b,)
            E = torch.mm(W, y.T, out=E_buf[: n_sv * len(o)].view(n_sv, len(o)))  # 2 g sv.y
            if sv_r2 < math.inf and 2 * g * max(sv_r2, float(y_sq.max())) < 700:
                torch.mv(E.exp_().T, a_sv, out=o)
                o *= y_sq.mul_(-g).exp_()
            else:
                E -= (g * sv_sq)[:, None]
                torch.mv(E.sub_(y_sq, alpha=g).exp_().T, a, out=o)
        return out.sub_(self.offset_.to(Y.device))

    def score(self, Y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(f(Y), f(Y) > 0): the decision values (m,) float64 and the inlier mask (m,) bool.

        After a Triton fit with the RBF kernel both come from ONE Triton launch
        (:mod:`negatives.ocsvm.kernels_triton`, no host sync); else from :meth:`decision_function`.
        """
        Y = self._check(Y)
        if self._fused_scoring(Y):
            return self._score_triton(Y)
        f = self.decision_function(Y)
        return f, f > 0

    def _check(self, Y: torch.Tensor) -> torch.Tensor:
        if "_sv" not in self.__dict__:
            raise ValueError("this OneClassSVM is not fitted yet; call fit(X) first")
        Y = torch.as_tensor(Y).detach()
        if Y.ndim != 2 or Y.shape[1] != self._d:
            raise ValueError(f"Y must be (m, {self._d}) like the fitted X, got {tuple(Y.shape)}")
        return Y

    def _fused_scoring(self, Y: torch.Tensor) -> bool:
        """Whether Y is scored by the Triton kernel: after a Triton fit (RBF), on its device,
        unless the kernel failed at its first launch (then the batched aten path scores)."""
        ok = self.__dict__.get("_score_state") != "failed"
        return ok and self._dense and self.kernel == "rbf" and Y.device == self._sv.device

    def _score_triton(self, Y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from negatives.ocsvm import kernels_triton

        dev = self._sv.device
        Y = Y if Y.stride(-1) == 1 else Y.contiguous()
        gamma = self._constant(dev, "gamma", 0)[0]
        args = (Y, self._sv, self._sv_sq, self._coef, self.offset_, gamma)
        if self.__dict__.get("_score_state") == "ok":
            return kernels_triton.score(*args)
        try:  # the first scoring: a kernel that fails to compile or launch falls back
            out = kernels_triton.score(*args)
        except Exception as e:  # noqa: BLE001
            self._score_state = "failed"
            warnings.warn(
                f"the Triton OC-SVM scoring kernel cannot run here ({support.first_line(e)}); "
                "scoring with batched tensor ops instead (the same decision values)",
                RuntimeWarning,
                stacklevel=3,
            )
            f = self.decision_function(Y)
            return f, f > 0
        self._score_state = "ok"
        return out

    def predict(self, Y: torch.Tensor) -> torch.Tensor:
        """+1 for inliers (f > 0, as libsvm), -1 for outliers: (m,) int64 on Y's device."""
        return torch.where(self.decision_function(Y) > 0, 1, -1)
