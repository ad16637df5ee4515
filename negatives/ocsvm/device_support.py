"""What the OC-SVM needs besides its own solvers: whether the Triton kernels can run here, the
per-device constants of the Triton fit (built from tensor ops on the device, never copied from
the host), the one-copy readback of a device solution, and the wrapped backends (scikit-learn,
thundersvm)."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import torch

from negatives.ocsvm import smo

# The oldest triton the kernels launch on (CI launches them through a stand-in driver on it);
# triton 3.0-3.4 reject float64 tl.dot
TRITON_MIN = (3, 5)


def has_triton() -> bool:
    """Whether triton can be imported (without importing it: the package imports without it)."""
    return importlib.util.find_spec("triton") is not None


def triton_unusable() -> str:
    """Why the Triton OC-SVM cannot run here ("" if it can): triton missing or older than
    :data:`TRITON_MIN`."""
    if not has_triton():
        return "triton is not installed"
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("triton")
    except PackageNotFoundError:  # importable but not installed as a distribution (a source tree)
        import triton

        found = triton.__version__
    parts = tuple(int(p) for p in found.split("+")[0].split(".")[:2] if p.isdigit())
    if parts < TRITON_MIN:
        oldest = ".".join(map(str, TRITON_MIN))
        return f"triton {found} is older than {oldest}, the oldest the kernels run on"
    return ""


def fit_constant(
    what: str, n: int, dev: torch.device, nu: float, gamma: float, tol: float
) -> tuple[torch.Tensor, int]:
    """One constant of the Triton fit on ``dev``: the initial alpha for (nu, n) with its count of
    nonzeros ("alpha0"), ones(n), the integer 0 ("zero"), gamma, or (eps, TAU) ("params")."""
    f64 = {"dtype": torch.float64, "device": dev}
    if what == "alpha0":  # smo.initial_alpha: min(1, nu_l - i) >= 0, exact in float64
        nu_l = float(np.cumsum(np.full(n, nu))[-1])  # accumulated as libsvm does
        a = torch.arange(n, **f64).neg_().add_(nu_l).clamp_(0.0, 1.0)
        return a, int(np.count_nonzero(smo.initial_alpha(nu, n)))
    if what == "ones":
        return torch.ones(n, **f64), n
    if what == "zero":
        return torch.zeros((), dtype=torch.long, device=dev), 0
    if what == "gamma":
        return torch.full((1,), gamma, **f64), 1
    eps, tau = torch.full((1,), tol, **f64), torch.full((1,), smo._TAU, **f64)
    return torch.cat([eps, tau]), 2


def first_line(e: BaseException) -> str:
    """``Type: the first line of the message`` (compiler errors run to pages)."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def solution_to_host(G: Any, alpha: Any, perm: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(G, alpha, perm) as numpy arrays, in one device-to-host copy when they are tensors (one
    sync on CUDA, not three): perm's indices are exact in float64."""
    if not all(isinstance(t, torch.Tensor) for t in (G, alpha, perm)):
        return tuple(np.asarray(torch.as_tensor(t).cpu()) for t in (G, alpha, perm))  # type: ignore
    n = len(perm)
    both = torch.cat([G.to(torch.float64), alpha.to(torch.float64), perm.to(torch.float64)])
    host = both.cpu().numpy()
    return host[: len(G)], host[len(G) : len(G) + len(alpha)], host[-n:].astype(np.int64)


def fit_wrapped(
    backend: str, X: np.ndarray, kw: dict[str, Any]
) -> tuple[Any, np.ndarray, float, int, int]:
    """``backend="sklearn"`` or ``"thundersvm"`` fitted on ``X``: (the fitted model, dense alpha
    (n,), rho, iterations (-1: not reported), status)."""
    if backend == "sklearn":
        from sklearn.svm import OneClassSVM as Wrapped
    else:
        Wrapped = thundersvm()
    m = Wrapped(**kw)
    m.fit(X)
    alpha = np.zeros(len(X))
    alpha[np.asarray(m.support_)] = np.asarray(m.dual_coef_, dtype=np.float64)[0]
    if backend == "sklearn":
        return m, alpha, -float(m.intercept_[0]), m.n_iter_, m.fit_status_
    return m, alpha, float(m.intercept_[0]), -1, 0  # thundersvm keeps rho, and no iteration count


def thundersvm() -> Any:
    """thundersvm's ``OneClassSVM`` class, or ImportError saying how to install it."""
    try:
        from thundersvm import OneClassSVM as Wrapped
    except ImportError as e:
        raise ImportError(
            "backend='thundersvm' needs the thundersvm package: pip install thundersvm-cpu (or "
            "thundersvm for CUDA); backend='torch' needs nothing more"
        ) from e
    return Wrapped


def scratch(store: dict, device: torch.device, *sizes: int) -> list[torch.Tensor]:
    """Flat float64 buffers of the given sizes on device, kept in ``store`` between calls."""
    bufs = store.setdefault("_buffers", {})
    key = str(device)
    if key not in bufs or len(bufs[key]) < sum(sizes):
        bufs[key] = torch.empty(sum(sizes), dtype=torch.float64, device=device)
    ends = [sum(sizes[: i + 1]) for i in range(len(sizes))]
    return [bufs[key][e - n : e] for n, e in zip(sizes, ends)]
