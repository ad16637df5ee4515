"""i-Mix (Lee et al. 2021) against a numpy re-derivation of kibok90/imix ``builder.py`` (``mocon``
with ``--imix imixup``): mixed query images, virtual labels over the batch keys + queue. The loss
comparison covers the gradient with respect to the (mixed) queries as well as the value: autograd
on ours against central finite differences of the numpy form (``fd_grad``); keys and queue are
constants in MoCo's layout."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pretrain import losses
from pretrain.losses import imix
from pretrain.losses.base import Step
from tests.helpers.fd_grad import assert_grad_matches_fd, autograd
from tests.helpers.vectors import unit


def np_mocon_imix(q, k, queue, t, lam, partner):
    """logits = q [k; queue]^T / T; loss = mean(lam CE(i) + (1 - lam) CE(partner(i)))."""
    logits = q @ np.concatenate([k, queue]).T / t
    m = logits.max(1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(1, keepdims=True))
    rows = np.arange(len(q))
    return float(np.mean(-(lam * logp[rows, rows] + (1 - lam) * logp[rows, partner])))


def test_imix_loss_matches_the_official_mocon_form():
    n = 10
    q, k, queue = unit(n, 16, seed=0), unit(n, 16, seed=1), unit(40, 16, seed=2)
    loss_fn = losses.create("imix", temperature=0.2)
    torch.manual_seed(0)
    x = torch.randn(n, 3, 4, 4, dtype=torch.float64)
    mixed = loss_fn.transform_queries(x)
    lam, partner = loss_fn._draw
    assert torch.allclose(
        mixed, lam.view(-1, 1, 1, 1) * x + (1 - lam.view(-1, 1, 1, 1)) * x[partner]
    )
    ours = loss_fn(Step.single(q, k, queue=queue))
    ref = np_mocon_imix(q.numpy(), k.numpy(), queue.numpy(), 0.2, lam.numpy(), partner.numpy())
    assert abs(ours.item() - ref) < 1e-10

    def again(v):
        loss_fn._draw = (lam, partner)  # the loss consumes its draw: the same one again
        return loss_fn(Step.single(v, k, queue=queue))

    (grad,) = autograd(again, q)
    assert_grad_matches_fd(
        grad,
        lambda v: np_mocon_imix(v, k.numpy(), queue.numpy(), 0.2, lam.numpy(), partner.numpy()),
        q.numpy(),
    )


def test_lambda_is_folded_and_partners_stay_in_their_group():
    torch.manual_seed(1)
    lam, partner = imix.mix_draw(64, 4, alpha=1.0, device=torch.device("cpu"))
    assert (lam >= 0.5).all() and (lam <= 1).all()
    group = torch.arange(64) // 16
    assert torch.equal(group[partner], group)  # a permutation inside each BN group
    assert torch.equal(partner.sort().values, torch.arange(64))
    # Beta(1, 1) folded is uniform on [0.5, 1]: its mean is 0.75
    lam_many, _ = imix.mix_draw(20000, 1, alpha=1.0, device=torch.device("cpu"))
    assert abs(lam_many.mean().item() - 0.75) < 0.01


def test_lambda_one_and_partner_self_is_infonce_over_batch_and_queue():
    n = 6
    q, k, queue = unit(n, 8, seed=3), unit(n, 8, seed=4), unit(20, 8, seed=5)
    logits = q @ torch.cat([k, queue]).T / 0.1
    own = torch.arange(n)
    lam = torch.ones(n, dtype=torch.float64)
    assert torch.allclose(
        imix.imix_loss(logits, own, own.flip(0), lam), F.cross_entropy(logits, own)
    )


def test_diagnostics_leave_out_the_two_targets():
    n = 8
    q, k, queue = unit(n, 8, seed=6), unit(n, 8, seed=7), unit(24, 8, seed=8)
    labels, queue_labels = torch.arange(n) % 2, torch.arange(24) % 2
    loss_fn = losses.create("imix", temperature=0.1)
    loss_fn.transform_queries(torch.zeros(n, 3, 2, 2))
    _, partner = loss_fn._draw
    loss_fn(Step.single(q, k, queue=queue, labels=labels, queue_labels=queue_labels))
    diag = loss_fn.diagnostics()
    cand = np.concatenate([labels.numpy(), queue_labels.numpy()])
    fracs, counts = [], []
    for i in range(n):
        keep = np.ones(n + 24, bool)
        keep[[i, partner[i].item()]] = False
        counts.append(keep.sum())
        fracs.append((cand[keep] == labels[i].item()).mean())
    assert diag["effective_negatives"].item() == pytest.approx(np.mean(counts))
    assert diag["false_negative_fraction"].item() == pytest.approx(np.mean(fracs), abs=1e-6)


def test_the_loss_without_mixed_queries_is_refused():
    q, k, queue = unit(4, 8, seed=9), unit(4, 8, seed=10), unit(8, 8, seed=11)
    with pytest.raises(ValueError, match="transform_queries"):
        losses.create("imix", temperature=0.1)(Step.single(q, k, queue=queue))
    with pytest.raises(ValueError, match="alpha"):
        losses.create("imix", temperature=0.1, alpha=0.0)
