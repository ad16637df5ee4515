"""Seeded unit vectors and a float64 log-sum-exp: the inputs and the reduction the loss tests'
numpy re-derivations share."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def unit(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``shape`` standard normal draws of a seeded generator, normalised along the last dim."""
    g = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(*shape, generator=g, dtype=dtype), dim=-1)


def logsumexp(x) -> float:
    """log Σ e^x shifted by the max (scipy.special.logsumexp's value without its per-call cost,
    which dominates the finite differences)."""
    x = np.asarray(x, dtype=np.float64)
    m = x.max()
    return float(m + np.log(np.exp(x - m).sum()))
