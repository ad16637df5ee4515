"""Central finite differences of a float64 numpy reference, to compare gradients with.

A test computes our loss's gradient with autograd and compares it with the central difference
(f(x + h e_i) − f(x − h e_i)) / 2h of the *reference's* value, so that the reference gradient owes
nothing to our code. With h = 1e-6 in float64 the truncation error is O(h² f''') and the rounding
error O(1e-16 |f| / h), both far below the relative tolerance of 1e-7 used here for the smooth
losses at the temperatures of the tests.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

EPS = 1e-6
RTOL = 1e-7


def central_difference(
    fn: Callable[[np.ndarray], float], x: np.ndarray, eps: float = EPS
) -> np.ndarray:
    """∂fn/∂x by central differences, one coordinate at a time (2 · x.size evaluations)."""
    x = np.array(x, dtype=np.float64)  # a private copy, perturbed in place
    grad = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        orig = x[idx]
        x[idx] = orig + eps
        up = fn(x.copy())
        x[idx] = orig - eps
        down = fn(x.copy())
        x[idx] = orig
        grad[idx] = (up - down) / (2 * eps)
    return grad


def assert_grad_matches_fd(
    grad: np.ndarray,
    fn: Callable[[np.ndarray], float],
    x: np.ndarray,
    rtol: float = RTOL,
    eps: float = EPS,
) -> np.ndarray:
    """Assert that ``grad`` equals the central difference of ``fn`` at ``x`` to ``rtol`` (relative
    to each entry, with an absolute floor of ``rtol`` times the largest entry); returns the
    reference. Refuses a reference that is zero everywhere (the comparison would say nothing)."""
    ref = central_difference(fn, x, eps)
    scale = float(np.abs(ref).max())
    assert scale > 1e-3, f"the reference gradient is ~0 everywhere (max |g| = {scale:g})"
    np.testing.assert_allclose(np.asarray(grad), ref, rtol=rtol, atol=rtol * scale)
    return ref


def autograd(fn: Callable[..., torch.Tensor], *xs: torch.Tensor) -> list[np.ndarray]:
    """The gradients of the scalar ``fn(*xs)`` with respect to each of ``xs`` (leaf copies), as
    numpy arrays (zeros where ``fn`` does not depend on an input)."""
    leaves = [x.detach().clone().requires_grad_(True) for x in xs]
    grads = torch.autograd.grad(fn(*leaves), leaves, allow_unused=True)
    return [np.zeros(x.shape) if g is None else g.detach().numpy() for x, g in zip(leaves, grads)]
