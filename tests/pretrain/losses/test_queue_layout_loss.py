"""Batch contrastive losses in MoCo's layout (queries vs keys + queue) against numpy loops.

The reference re-states the rules of the issue per anchor i with l_ij = q_i·c_j / τ:
P(i) = own key, plus (supcon/sincere) candidates with the anchor's label where -1 matches nothing,
plus (firm, anchor label >= 0) every candidate with label >= 0. Denominator: every candidate and
private negative (nt_xent/supcon/firm); for SINCERE, each positive plus the anchor's negatives.
The comparisons with it cover the gradient with respect to the queries (the only input that carries
gradient in this layout) as well as the value: autograd on ours against central finite differences
of the numpy loop (``fd_grad``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pretrain import losses
from pretrain.losses import info_nce, moco_logits
from pretrain.losses.queue_layout import QueueContrastive
from tests.helpers.fd_grad import assert_grad_matches_fd, autograd
from tests.helpers.queue_forms import QUEUE_KINDS, queue_contrastive, queue_positives
from tests.helpers.vectors import logsumexp, unit

N, D, K, M, S = 4, 8, 10, 3, 2  # queries per rank, dim, queue, shared synthetic, private
TOL = 1e-10


def np_queue_loss(q, cand, y_q, y_c, own, t, kind, per_query=None):
    losses = []
    for i in range(len(q)):
        pos = []
        for j in range(len(cand)):
            if j == own[i]:
                pos.append(j)
            elif kind in ("supcon", "sincere") and y_q[i] != -1 and y_c[j] == y_q[i]:
                pos.append(j)
            elif kind == "firm" and y_q[i] >= 0 and y_c[j] >= 0:
                pos.append(j)
        l_cand = [float(np.dot(q[i], c)) / t for c in cand]
        l_priv = [] if per_query is None else [float(np.dot(q[i], v)) / t for v in per_query[i]]
        if kind == "sincere":
            neg = [l_cand[j] for j in range(len(cand)) if j not in pos] + l_priv
            terms = [logsumexp([l_cand[p]] + neg) - l_cand[p] for p in pos]
        else:
            lse = logsumexp(l_cand + l_priv)
            terms = [lse - l_cand[p] for p in pos]
        losses.append(np.mean(terms))
    return float(np.mean(losses))


@pytest.fixture
def batch():
    """Rank 1 of 2: candidates = keys of ranks 0 and 1, then queue, then shared synthetic."""
    g = torch.Generator().manual_seed(7)
    key_labels = torch.tensor([1, 0, -3, -1, 0, 2, -2, -1])  # rank 1's own keys are rows 4..7
    queue_labels = torch.tensor([-1, -2, -3, 0, 1, 2, 0, -2, -1, 2])
    return {
        "q": unit(N, D, seed=1),
        "candidates": unit(2 * N + K + M, D, seed=2),
        "anchor_labels": key_labels[N:].clone(),  # [0, 2, -2, -1]: class, class, outlier, unknown
        "candidate_labels": torch.cat([key_labels, queue_labels, torch.full((M,), -1)]),
        "own": torch.arange(N) + N,
        "per_query": unit(N, S, D, seed=3),
        "g": g,
    }


def call(batch, kind, t=0.2, per_query=True, **kw):
    return queue_contrastive(
        batch["q"],
        batch["candidates"],
        batch["anchor_labels"],
        batch["candidate_labels"],
        batch["own"],
        t,
        kind,
        batch["per_query"] if per_query else None,
        **kw,
    )


def reference(batch, kind, t=0.2, per_query=True, q=None):
    return np_queue_loss(
        batch["q"].numpy() if q is None else q,
        batch["candidates"].numpy(),
        batch["anchor_labels"].numpy(),
        batch["candidate_labels"].numpy(),
        batch["own"].numpy(),
        t,
        kind,
        batch["per_query"].numpy() if per_query else None,
    )


@pytest.mark.parametrize("kind", QUEUE_KINDS)
@pytest.mark.parametrize("per_query", [False, True])
@pytest.mark.parametrize("t", [0.1, 0.5])
def test_matches_numpy(batch, kind, per_query, t):
    loss = call(batch, kind, t, per_query)
    assert loss.dtype == torch.float64
    assert loss.item() == pytest.approx(reference(batch, kind, t, per_query), abs=TOL)
    (grad,) = autograd(lambda q: call(dict(batch, q=q), kind, t, per_query), batch["q"])
    assert_grad_matches_fd(
        grad, lambda q: reference(batch, kind, t, per_query, q=q), batch["q"].numpy()
    )


def test_every_registered_queue_layout_kind_has_a_reference():
    """Every in-tree loss on QueueContrastive (its own positives / reduce) is re-derived by
    np_queue_loss, and a loss outside the queue layout is refused by name."""
    tree = {
        name
        for name in losses.list_losses()
        if issubclass(losses.registry.get(name), QueueContrastive)
        and losses.registry.get(name).__module__.startswith("pretrain.")
    }
    assert tree == set(QUEUE_KINDS)
    with pytest.raises(ValueError, match=r"kind must be a queue-layout loss, got 'infonce'"):
        queue_positives("infonce", torch.zeros(2), torch.zeros(3), torch.zeros(2))


def test_kinds_differ_on_repeated_and_outlier_labels(batch):
    values = [call(batch, kind).item() for kind in QUEUE_KINDS]
    assert len({round(v, 6) for v in values}) == len(QUEUE_KINDS)


def test_reference_scale(batch):
    scaled = call(batch, "supcon", 0.1, reference_scale=True).item()
    assert scaled == pytest.approx(reference(batch, "supcon", 0.1) * 0.1 / 0.07, abs=TOL)
    (grad,) = autograd(
        lambda q: call(dict(batch, q=q), "supcon", 0.1, reference_scale=True), batch["q"]
    )
    assert_grad_matches_fd(
        grad, lambda q: reference(batch, "supcon", 0.1, q=q) * 0.1 / 0.07, batch["q"].numpy()
    )


@pytest.mark.parametrize("per_query", [False, True])
def test_distinct_labels_reduce_to_moco_info_nce(batch, per_query):
    labels = torch.cat([torch.arange(2 * N) + 10, torch.full((K + M,), -1)])
    batch["candidate_labels"] = labels
    batch["anchor_labels"] = labels[batch["own"]]
    cand, own = batch["candidates"], batch["own"].tolist()
    rows = []
    for i in range(N):  # the other queries' keys are negatives too: one MoCo call per query
        perm = torch.randperm(len(cand), generator=batch["g"]).tolist()
        others = [j for j in perm if j != own[i]]  # every candidate but its own key, shuffled
        pq = batch["per_query"][i : i + 1] if per_query else None
        q_i, k_i = batch["q"][i : i + 1], cand[own[i]].unsqueeze(0)
        rows.append(info_nce(moco_logits(q_i, k_i, cand[others], 0.2, per_query=pq)).item())
    for kind in ("nt_xent", "supcon", "sincere"):
        loss = call(batch, kind, per_query=per_query).item()
        assert loss == pytest.approx(np.mean(rows), abs=TOL)


def test_no_label_matches_nothing(batch):
    batch["anchor_labels"] = torch.full((N,), -1)
    batch["candidate_labels"] = torch.full_like(batch["candidate_labels"], -1)
    base = call(batch, "nt_xent").item()
    assert call(batch, "supcon").item() == pytest.approx(base, abs=TOL)
    assert call(batch, "sincere").item() == pytest.approx(base, abs=TOL)
    assert call(batch, "firm").item() == pytest.approx(base, abs=TOL)


@pytest.mark.parametrize("kind", QUEUE_KINDS)
def test_gradcheck_float64(batch, kind):
    def f(q):
        return queue_contrastive(
            q,
            batch["candidates"],
            batch["anchor_labels"],
            batch["candidate_labels"],
            batch["own"],
            0.2,
            kind,
            batch["per_query"],
        )

    assert torch.autograd.gradcheck(f, (batch["q"].clone().requires_grad_(True),))


@pytest.mark.parametrize("kind", QUEUE_KINDS)
def test_gradient_reaches_only_the_queries(batch, kind):
    for name in ("q", "candidates", "per_query"):
        batch[name] = batch[name].clone().requires_grad_(True)
    call(batch, kind).backward()
    assert torch.isfinite(batch["q"].grad).all() and batch["q"].grad.abs().sum() > 0
    assert batch["candidates"].grad is None
    assert batch["per_query"].grad is None


@pytest.mark.parametrize("kind", QUEUE_KINDS)
def test_low_temperature_float32_is_finite(batch, kind):
    q = batch["q"].float().requires_grad_(True)
    loss = queue_contrastive(
        q,
        batch["candidates"].float(),
        batch["anchor_labels"],
        batch["candidate_labels"],
        batch["own"],
        0.002,
        kind,
        batch["per_query"].float(),
    )
    loss.backward()
    assert loss.dtype == torch.float32
    assert torch.isfinite(q.grad).all()
    assert loss.item() == pytest.approx(reference(batch, kind, 0.002), rel=1e-4)


def test_bfloat16_is_upcast(batch):
    batch["q"] = batch["q"].bfloat16()
    assert call(batch, "sincere").dtype == torch.float32


def test_errors_are_clear(batch):
    with pytest.raises(ValueError, match="kind must be a queue-layout loss"):
        call(batch, "infonce")
    with pytest.raises(ValueError, match="candidate_labels must have shape"):
        batch2 = dict(batch, candidate_labels=batch["candidate_labels"][:-1])
        call(batch2, "supcon")
    with pytest.raises(ValueError, match="own must be a long tensor"):
        call(dict(batch, own=batch["own"].int()), "supcon")
    with pytest.raises(ValueError, match="per_query must be"):
        call(dict(batch, per_query=batch["per_query"][:, :, :3]), "supcon")
    with pytest.raises(ValueError, match="temperature must be above"):
        call(batch, "firm", t=0.0)


@pytest.mark.parametrize("kind", ["nt_xent", "supcon", "sincere", "firm"])
def test_symmetric_layout_without_queue_is_the_multiview_equation(kind):
    """Anchors z = [view1; view2], candidates z itself (live), own = the other view, exclude = the
    row itself: the papers' 2N x 2N losses of tests/helpers/multiview.py, value and gradient."""
    from tests.helpers.multiview import firm, nt_xent, sincere, supcon

    g = torch.Generator().manual_seed(3)
    n = 5
    z = F.normalize(torch.randn(2 * n, 7, generator=g, dtype=torch.float64), dim=1)
    y = torch.tensor([0, 1, 1, 2, 0]).repeat(2)
    idx = torch.arange(2 * n)
    own = (idx + n) % (2 * n)
    za = z.clone().requires_grad_()
    got = queue_contrastive(za, za, y, y, own, 0.3, kind, exclude=idx, detach_candidates=False)
    zb = z.clone().requires_grad_()
    if kind == "nt_xent":
        ref = nt_xent(zb, 0.3)
    elif kind == "firm":
        ref = firm(zb, y != 1, 0.3)  # class 1 plays the outliers
        got = queue_contrastive(
            za, za, torch.where(y == 1, -2, y), torch.where(y == 1, -2, y), own, 0.3, kind,
            exclude=idx, detach_candidates=False,
        )  # fmt: skip
    else:
        ref = {"supcon": supcon, "sincere": sincere}[kind](zb, y, 0.3)
    assert torch.allclose(got, ref, atol=1e-12)
    got.backward()
    ref.backward()
    assert torch.allclose(za.grad, zb.grad, atol=1e-12)


@pytest.mark.parametrize("kind", ["nt_xent", "supcon", "sincere", "firm"])
def test_own_key_and_excluded_columns_are_written_without_a_host_scalar(kind):
    """The own key (always positive) and the excluded anchor columns are written with no would-be
    CUDA host sync (``x[rows, cols] = True`` copies its host scalar to the device first: CUDA's
    sync-debug mode raised there on an H200), in the loss, its backward and contrast_top1; the
    mask and the accuracy equal a numpy re-derivation."""
    from negmine_core.contract.sync_counter import SyncCounter
    from tests.helpers.queue_forms import contrast_top1

    g = torch.Generator().manual_seed(4)
    n = 6
    z = F.normalize(torch.randn(2 * n, 5, generator=g, dtype=torch.float64), dim=1)
    y = torch.tensor([0, 1, 1, 2, 0, 2]).repeat(2)
    idx = torch.arange(2 * n)
    own = (idx + n) % (2 * n)
    za = z.clone().requires_grad_()
    with SyncCounter() as syncs:
        loss = queue_contrastive(za, za, y, y, own, 0.3, kind, exclude=idx, detach_candidates=False)
        loss.backward()
        top1 = contrast_top1(z, z, y, y, own, kind, exclude=idx)
        positive = queue_positives(kind, y, y, own)
    assert syncs.count == 0, syncs.report()
    yn, ownn = y.numpy(), own.numpy()
    want = np.zeros((2 * n, 2 * n), dtype=bool)
    want[np.arange(2 * n), ownn] = True
    if kind in ("supcon", "sincere"):
        want |= yn[:, None] == yn[None, :]
    elif kind == "firm":
        want |= (yn[:, None] >= 0) & (yn[None, :] >= 0)
    np.testing.assert_array_equal(positive.numpy(), want)
    sim = z.numpy() @ z.numpy().T
    np.fill_diagonal(sim, -np.inf)  # each anchor left out of its own row
    hits = want[np.arange(2 * n), sim.argmax(1)]
    assert top1.item() == pytest.approx(100.0 * hits.mean())
