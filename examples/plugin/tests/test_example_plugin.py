"""The example plugin's own tests: what a contributor adds beside the strategy and the loss. The
contract (declarations, the record's form, determinism, host syncs and aten ops per step, the
CUDA-graph refusal) is checked by negmine's contract kit, installed with negmine
(``pretrain.testing``), one test per check (``BatchMix-check_records``, ...): no copy of negmine's
own test suite is needed. Run in a venv with negmine
and this package installed: ``python -m pytest examples/plugin/tests``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from negmine_example.loss import AlignUniform
from negmine_example.strategy import BatchMix

from negatives import ExtraNegatives, Step
from pretrain.testing import parametrize_with_checks


@parametrize_with_checks([BatchMix, AlignUniform])
def test_meets_the_contract(cls: type, check: Callable[[type], None]) -> None:
    check(cls)  # one test per check: a ContractError names the class, attribute and fix


def unit(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(*shape, generator=g, dtype=torch.float64), dim=-1)


def test_batch_mix_makes_unit_mixes_of_two_batch_keys() -> None:
    k = unit(8, 5, seed=0)
    torch.manual_seed(0)
    extra = BatchMix(num_mix=6).negatives(Step.single(k, k, queue=unit(10, 5, seed=1)))
    torch.manual_seed(0)  # the same draws, the mixing re-derived in numpy
    i, j = torch.randint(8, (6,)).numpy(), torch.randint(8, (6,)).numpy()
    a = torch.rand(6, 1).numpy()
    kn = k.float().numpy().astype(np.float64)
    want = a * kn[i] + (1 - a) * kn[j]
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert extra.shared.shape == (6, 5) and extra.shared.dtype == k.dtype
    assert np.allclose(extra.shared.numpy(), want, atol=1e-6)


def test_batch_mix_with_zero_mixes_is_plain_moco() -> None:
    k = unit(4, 3, seed=2)
    extra = BatchMix(num_mix=0).negatives(Step.single(k, k, queue=unit(6, 3, seed=3)))
    assert extra.shared is None and extra.per_query is None


def reference(
    q: np.ndarray,
    k: np.ndarray,
    queue: np.ndarray,
    t: float,
    alpha: float,
    weight: float,
    own: np.ndarray | None = None,
) -> float:
    """Eqs. 4-5 of Wang & Isola 2020 in numpy; ``own``: each query's own negatives (N, S, D)."""
    align = np.mean(np.linalg.norm(q - k, axis=1) ** alpha)
    sq = ((q[:, None, :] - queue[None, :, :]) ** 2).sum(-1)
    if own is not None:
        sq = np.concatenate([sq, ((q[:, None, :] - own) ** 2).sum(-1)], axis=1)
    return float(align + weight * np.log(np.mean(np.exp(-t * sq))))


def test_align_uniform_equals_the_equations_with_their_gradient() -> None:
    q, k, queue = unit(6, 4, seed=4), unit(6, 4, seed=5), unit(9, 4, seed=6)
    shared = unit(3, 4, seed=7)
    crit = AlignUniform(t=1.5, alpha=2.0, weight=0.5)
    q = q.clone().requires_grad_(True)
    step = Step.single(q, k, queue=queue, extra=ExtraNegatives(shared=shared))
    loss = crit(step)
    want = reference(q.detach().numpy(), k.numpy(), np.concatenate([queue, shared]), 1.5, 2.0, 0.5)
    assert abs(loss.item() - want) < 1e-12
    loss.backward()
    eps, g = 1e-6, np.zeros(q.shape)  # central differences of the reference
    base = q.detach().numpy()
    for i in range(q.shape[0]):
        for j in range(q.shape[1]):
            hi, lo = base.copy(), base.copy()
            hi[i, j] += eps
            lo[i, j] -= eps
            args = (k.numpy(), np.concatenate([queue, shared]), 1.5, 2.0, 0.5)
            g[i, j] = (reference(hi, *args) - reference(lo, *args)) / (2 * eps)
    assert np.allclose(q.grad.numpy(), g, atol=1e-6)


def test_align_uniform_takes_each_querys_own_negatives() -> None:
    q, k, queue, own = (
        unit(5, 4, seed=8),
        unit(5, 4, seed=9),
        unit(7, 4, seed=10),
        unit(5, 2, 4, seed=11),
    )
    crit = AlignUniform(t=2.0, alpha=2.0, weight=1.0)
    step = Step.single(q, k, queue=queue, extra=ExtraNegatives(per_query=own))
    want = reference(q.numpy(), k.numpy(), queue.numpy(), 2.0, 2.0, 1.0, own=own.numpy())
    assert abs(crit(step).item() - want) < 1e-12
