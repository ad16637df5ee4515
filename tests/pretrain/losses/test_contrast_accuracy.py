"""Contrast accuracy: top-1 of a positive among the contrast set, logged as
``loss_contrast_top1`` for every objective where it is defined (moco main_moco.py: Acc@1)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from negatives.base import ExtraNegatives
from negmine_core.conventions import NO_LABEL
from pretrain import losses
from tests.helpers import vectors
from tests.helpers.queue_forms import contrast_top1

unit = partial(vectors.unit, dtype=torch.float32)  # this file draws float32


def np_top1(q, c, al, cl, own, kind, private=None, exclude=None):
    """Loop re-derivation: anchor i hits if argmax_j q_i.c_j (j != exclude_i) is in P(i) and no
    private negative is more similar."""
    hits = []
    for i in range(len(q)):
        sims = c @ q[i]
        if exclude is not None:
            sims[exclude[i]] = -np.inf
        j = int(np.argmax(sims))
        pos = j == own[i]
        if kind in ("supcon", "sincere"):
            pos |= al[i] == cl[j] and al[i] != NO_LABEL
        elif kind == "firm":
            pos |= al[i] >= 0 and cl[j] >= 0
        if private is not None:
            pos &= (private[i] @ q[i]).max() <= sims[j]
        hits.append(pos)
    return 100.0 * np.mean(hits)


@pytest.mark.parametrize("kind", ["nt_xent", "supcon", "sincere", "firm"])
@pytest.mark.parametrize("extras", [False, True])
def test_contrast_top1_equals_a_loop(kind, extras):
    n, m, d = 24, 40, 8
    q, c = unit(n, d, seed=1), unit(m, d, seed=2)
    own = torch.randperm(m, generator=torch.Generator().manual_seed(3))[:n]
    c[own] = F.normalize(q + 0.8 * unit(n, d, seed=4), dim=1)  # own keys near: some hits
    al = torch.randint(-2, 4, (n,), generator=torch.Generator().manual_seed(5))
    cl = torch.randint(-2, 4, (m,), generator=torch.Generator().manual_seed(6))
    private = unit(n, 3, d, seed=7) if extras else None
    exclude = (own + 1) % m if extras else None
    got = contrast_top1(q, c, al, cl, own, kind, private, exclude)
    want = np_top1(q.numpy().astype(np.float64), c.numpy().astype(np.float64), al.numpy(),
                   cl.numpy(), own.numpy(), kind,
                   None if private is None else private.numpy().astype(np.float64),
                   None if exclude is None else exclude.numpy())  # fmt: skip
    assert float(got) == pytest.approx(want, abs=1e-4)
    assert 0.0 < want < 100.0  # the data separates hits from misses


def step(n: int = 16, k: int = 32, d: int = 8, noise: float = 0.5) -> losses.Step:
    q = unit(n, d, seed=11)
    key = F.normalize(q + noise * unit(n, d, seed=12), dim=1)
    labels = torch.arange(n) % 4
    return losses.Step.single(
        q, key, queue=unit(k, d, seed=13), labels=labels, extra=ExtraNegatives(unit(5, d, seed=14))
    )


def test_infonce_logs_mocos_acc1():
    s = step(noise=1.5)
    crit = losses.create("infonce", temperature=0.2)
    crit(s)
    logits = torch.cat([(s.emb.q * s.emb.k).sum(1, keepdim=True), s.emb.q @ s.queue.T,
                        s.emb.q @ s.extra.shared.T], dim=1)  # fmt: skip
    want = 100.0 * (logits.argmax(1) == 0).float().mean()  # main_moco.py's accuracy, top-1
    assert 0.0 < float(want) < 100.0
    assert float(crit.diagnostics()["contrast_top1"]) == pytest.approx(float(want))


@pytest.mark.parametrize("name", ["nt_xent", "supcon", "sincere", "firm"])
def test_batch_objectives_log_it_and_nt_xent_matches_infonce(name):
    s = step()
    crit = losses.create(name, temperature=0.2)
    crit(s)
    top1 = float(crit.diagnostics()["contrast_top1"])
    assert 0.0 <= top1 <= 100.0
    if name == "nt_xent":  # own key among batch keys + queue + extras: the batch keys add rivals
        cand = torch.cat([s.k_all, s.queue, s.extra.shared])
        want = 100.0 * ((s.emb.q @ cand.T).argmax(1) == torch.arange(16)).float().mean()
        assert top1 == pytest.approx(float(want))


def test_not_logged_before_the_first_step():
    assert losses.create("infonce", temperature=0.2).diagnostics() == {}
