"""MoCHi and modified MoCHi against a numpy re-derivation of SEMANTICS.md §2 with given draws."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import negatives
import negatives.mochi as mochi  # registers the strategies (also before __init__ imports it)
from negatives.base import Step
from pretrain.losses import info_nce, moco_logits

B, D, K, NH = 6, 8, 40, 5  # batch, dim, queue size, hard-set size N


def inputs(seed: int, dtype: torch.dtype = torch.float64, b: int = B):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(b, D, generator=g, dtype=dtype), dim=1)
    k = F.normalize(torch.randn(b, D, generator=g, dtype=dtype), dim=1)
    queue = F.normalize(torch.randn(K, D, generator=g, dtype=dtype), dim=1)
    queue_labels = torch.randint(-1, 3, (K,), generator=g)
    labels = torch.randint(-1, 3, (b,), generator=g)
    return q, k, queue, queue_labels, labels


def given_draws(rows: int, s: int, s2: int, seed: int = 0) -> mochi.Draws:
    """Explicit draws from numpy, so that the reference does not depend on torch's RNG."""
    rng = np.random.default_rng(seed)
    i, j = rng.integers(0, NH, (2, rows, s))
    return mochi.Draws(
        torch.from_numpy(i),
        torch.from_numpy(j),
        torch.from_numpy(rng.uniform(0, 1, (rows, s))),
        torch.from_numpy(rng.integers(0, NH, (rows, s2))),
        torch.from_numpy(rng.uniform(0, 0.5, (rows, s2))),
    )


def supply(monkeypatch, draws: mochi.Draws, chosen: np.ndarray | None = None) -> None:
    monkeypatch.setattr(mochi, "draw", lambda *args, **kwargs: draws)
    if chosen is not None:
        monkeypatch.setattr(mochi, "choose_queries", lambda *args: torch.from_numpy(chosen))


# ---- numpy reference -------------------------------------------------------------------------


def np_normalize(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def np_hard(q: np.ndarray, queue: np.ndarray, n: int) -> np.ndarray:
    """Indices of each query's n most similar queue keys, most similar first."""
    return np.argsort(-(q @ queue.T), axis=1, kind="stable")[:, :n]


def np_mochi(q, queue, d: mochi.Draws, bug: bool = False) -> np.ndarray:
    """(B, s + s', D). ``bug``: MaugrimEP's indexing, every query mixes query 0's hard set."""
    q, queue = q.numpy(), queue.numpy()
    hard = np_hard(q, queue, NH)
    i, j, alpha, jq, beta = (t.numpy() for t in d)
    out = []
    for b in range(q.shape[0]):
        own = hard[0] if bug else hard[b]
        h = [alpha[b, t] * queue[own[i[b, t]]] + (1 - alpha[b, t]) * queue[own[j[b, t]]]
             for t in range(i.shape[1])]  # fmt: skip
        hq = [
            beta[b, t] * q[b] + (1 - beta[b, t]) * queue[own[jq[b, t]]] for t in range(jq.shape[1])
        ]
        out.append(np_normalize(np.array(h + hq).reshape(-1, q.shape[1])))
    return np.stack(out)


def np_modified(q, queue, d: mochi.Draws, chosen: np.ndarray) -> np.ndarray:
    """(s + s', D): point r uses query chosen[r] and its hard set; draws are (1, s) and (1, s')."""
    q, queue = q.numpy(), queue.numpy()
    hard = np_hard(q, queue, NH)
    i, j, alpha, jq, beta = (t.numpy()[0] for t in d)
    s = i.shape[0]
    out = []
    for r, c in enumerate(chosen):
        if r < s:
            out.append(alpha[r] * queue[hard[c, i[r]]] + (1 - alpha[r]) * queue[hard[c, j[r]]])
        else:
            t = r - s
            out.append(beta[t] * q[c] + (1 - beta[t]) * queue[hard[c, jq[t]]])
    return np_normalize(np.array(out).reshape(-1, q.shape[1]))


def mochi_(**kwargs) -> mochi.MoCHi:
    return negatives.create("mochi", **{"num_hard": NH, "warmup_epochs": 0.0, **kwargs})


def modified(**kwargs) -> mochi.ModifiedMoCHi:
    return negatives.create("modified_mochi", **{"num_hard": NH, "warmup_epochs": 0.0, **kwargs})


# ---- MoCHi -----------------------------------------------------------------------------------


def test_registered():
    names = negatives.list_strategies()
    assert "mochi" in names and "modified_mochi" in names
    assert type(negatives.create("mochi")) is mochi.MoCHi
    assert type(negatives.create("modified_mochi")) is mochi.ModifiedMoCHi
    assert not mochi.MoCHi.needs_global_batch and mochi.ModifiedMoCHi.needs_global_batch


@pytest.mark.parametrize("s, s2", [(4, 3), (4, 0), (0, 3)])
def test_per_query_points_match_numpy(monkeypatch, s, s2):
    q, k, queue, queue_labels, _ = inputs(0)
    hard = np_hard(q.numpy(), queue.numpy(), NH)
    assert len({tuple(sorted(h)) for h in hard}) == B  # every query has its own hard set
    d = given_draws(B, s, s2)
    supply(monkeypatch, d)
    extra = mochi_(num_mix=s, num_query_mix=s2).negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=3.0)
    )
    assert extra.shared is None and extra.per_query.shape == (B, s + s2, D)
    ref = np_mochi(q, queue, d)
    np.testing.assert_allclose(extra.per_query.numpy(), ref, rtol=0, atol=1e-12)
    # The reference tells the MaugrimEP indexing bug apart (queries 1.. would mix query 0's set).
    assert not np.allclose(np_mochi(q, queue, d, bug=True)[1:], ref[1:], atol=1e-3)


def test_class_uses_its_draw_function_in_order():
    """Without monkeypatching: seeded ``draw`` + the reference = the strategy's output."""
    q, k, queue, queue_labels, _ = inputs(1)
    torch.manual_seed(3)
    d = mochi.draw(B, NH, 4, 3, False, q.device, q.dtype)
    torch.manual_seed(3)
    out = mochi_(num_mix=4, num_query_mix=3).negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=0.0)
    )
    np.testing.assert_allclose(out.per_query.numpy(), np_mochi(q, queue, d), rtol=0, atol=1e-12)


@pytest.mark.parametrize("distinct", [False, True])
def test_draw_ranges(distinct):
    torch.manual_seed(0)
    d = mochi.draw(64, 4, 200, 200, distinct, torch.device("cpu"), torch.float32)
    assert d.i.shape == d.j.shape == d.alpha.shape == (64, 200)
    assert d.jq.shape == d.beta.shape == (64, 200)
    for idx in (d.i, d.j, d.jq):
        assert idx.dtype == torch.long and idx.min() == 0 and idx.max() == 3
    assert (d.alpha >= 0).all() and (d.alpha < 1).all() and d.alpha.std() > 0.25
    assert (d.beta >= 0).all() and (d.beta < 0.5).all() and d.beta.max() > 0.45
    same = (d.i == d.j).double().mean().item()
    if distinct:
        assert same == 0
        counts = torch.bincount((d.j - d.i).remainder(4).flatten(), minlength=4)
        assert counts[0] == 0 and (counts[1:] > 3800).all()  # j - i uniform on {1, 2, 3}
    else:
        assert abs(same - 0.25) < 0.02  # with replacement: i = j with probability 1/N


def test_outputs_unit_norm_and_h_prime_leans_to_the_negative(monkeypatch):
    q, k, queue, queue_labels, _ = inputs(2)
    torch.manual_seed(0)
    out = mochi_(num_mix=50, num_query_mix=50).negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=0.0)
    )
    norms = out.per_query.norm(dim=-1)
    torch.testing.assert_close(norms, torch.ones_like(norms), rtol=0, atol=1e-12)
    # β < 0.5 multiplies the query: each h' is closer to its n_j than to q (given draws)
    d = given_draws(B, 0, 50)
    supply(monkeypatch, d)
    hq = (
        mochi_(num_mix=0, num_query_mix=50)
        .negatives(Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=0.0))
        .per_query
    )
    hard = torch.from_numpy(np_hard(q.numpy(), queue.numpy(), NH))
    n_j = queue[torch.gather(hard, 1, d.jq)]
    assert ((hq * n_j).sum(-1) > (hq * q[:, None]).sum(-1)).all()


def test_detached_and_no_gradient_through_synthetic_points():
    q, k, queue, queue_labels, _ = inputs(3)
    q = q.clone().requires_grad_(True)
    torch.manual_seed(0)
    extra = mochi_(num_mix=4, num_query_mix=3).negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=0.0)
    )
    h = extra.per_query
    assert not h.requires_grad and h.grad_fn is None
    info_nce(moco_logits(q, k, queue, 0.2, per_query=h)).backward()
    grad_trainer = q.grad.clone()
    # the same loss written without any detach, and with the points as fresh constants
    q.grad = None
    logits = torch.cat(
        [(q * k).sum(1, keepdim=True), q @ queue.T, torch.einsum("nd,nsd->ns", q, h)], 1
    )
    info_nce(logits / 0.2).backward()
    grad_raw = q.grad.clone()
    q2 = q.detach().clone().requires_grad_(True)
    const = h.detach().clone()
    logits = torch.cat(
        [(q2 * k).sum(1, keepdim=True), q2 @ queue.T, torch.einsum("nd,nsd->ns", q2, const)], 1
    )
    info_nce(logits / 0.2).backward()
    torch.testing.assert_close(grad_trainer, q2.grad, rtol=0, atol=1e-14)
    torch.testing.assert_close(grad_raw, q2.grad, rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", ["mochi", "modified_mochi"])
@pytest.mark.parametrize("case", ["zero", "warmup"])
def test_zero_points_or_warmup_is_plain_moco(name, case):
    q, k, queue, queue_labels, labels = inputs(4)
    if case == "zero":
        strategy = negatives.create(name, num_hard=NH, num_mix=0, num_query_mix=0, warmup_epochs=0)
        epoch = 0.0
    else:
        strategy = negatives.create(name, num_hard=NH, warmup_epochs=10)
        epoch = 9.99
    extra = strategy.negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=epoch, labels=labels)
    )
    assert extra.shared is None and extra.per_query is None
    logits = moco_logits(q, k, queue, 0.2, extra.shared, extra.per_query)
    torch.testing.assert_close(logits, moco_logits(q, k, queue, 0.2), rtol=0, atol=0)
    assert set(strategy.diagnostics()) == {"sim_queue"}
    # warm-up ends at warmup_epochs exactly
    if case == "warmup":
        extra = strategy.negatives(
            Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=10.0, labels=labels)
        )
        assert (extra.per_query if name == "mochi" else extra.shared) is not None


@pytest.mark.parametrize("name", ["mochi", "modified_mochi"])
def test_seeded_determinism(name):
    def once(seed: int):
        torch.manual_seed(seed)
        q, k, queue, queue_labels, labels = inputs(5, torch.float32)
        strategy = negatives.create(name, num_hard=NH, num_mix=6, num_query_mix=4, warmup_epochs=0)
        extra = strategy.negatives(
            Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=1.0, labels=labels)
        )
        return extra.per_query if name == "mochi" else extra.shared, strategy.diagnostics()

    (a, diag_a), (b, diag_b), (c, _) = once(7), once(7), once(8)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert diag_a.keys() == diag_b.keys()
    assert all(torch.equal(diag_a[key], diag_b[key]) for key in diag_a)


@pytest.mark.parametrize("name", ["mochi", "modified_mochi"])
@pytest.mark.parametrize(
    "q_dtype, queue_dtype",
    [
        (torch.float64, torch.float64),
        (torch.float32, torch.float64),
        (torch.bfloat16, torch.float32),
    ],
)
def test_dtype_and_device_follow_q(name, q_dtype, queue_dtype):
    q, k, queue, queue_labels, _ = inputs(6)
    q, k, queue = q.to(q_dtype), k.to(q_dtype), queue.to(queue_dtype)
    torch.manual_seed(0)
    strategy = negatives.create(name, num_hard=NH, num_mix=3, num_query_mix=2, warmup_epochs=0)
    extra = strategy.negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=0.0)
    )
    out = extra.per_query if name == "mochi" else extra.shared
    assert out.dtype == q_dtype and out.device == q.device
    assert out.shape == ((B, 5, D) if name == "mochi" else (5, D))


def test_runs_under_cpu_autocast():
    q, k, queue, queue_labels, labels = inputs(6, torch.float32)
    torch.manual_seed(0)
    strategy = mochi_(num_mix=3, num_query_mix=2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        extra = strategy.negatives(
            Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=0.0, labels=labels)
        )
        logits = moco_logits(q, k, queue, 0.2, per_query=extra.per_query)
    assert extra.per_query.dtype == torch.float32 and logits.shape == (B, 1 + K + 5)
    assert all(torch.isfinite(v).all() for v in strategy.diagnostics().values())


@pytest.mark.cuda
def test_cuda_device_and_rng():
    q, k, queue, queue_labels, labels = (t.cuda() for t in inputs(6, torch.float32))
    torch.cuda.manual_seed(0)
    extra = mochi_(num_mix=3, num_query_mix=2).negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=0.0, labels=labels)
    )
    assert extra.per_query.device == q.device


# ---- modified MoCHi --------------------------------------------------------------------------


@pytest.mark.parametrize("s, s2", [(2, 1), (5, 4), (3, 0), (0, 2)])  # s+s' < B and >= B: both paths
def test_modified_points_match_numpy(monkeypatch, s, s2):
    q, k, queue, queue_labels, _ = inputs(7)
    chosen = np.random.default_rng(1).integers(0, B, s + s2)
    d = given_draws(1, s, s2, seed=2)
    supply(monkeypatch, d, chosen)
    extra = modified(num_mix=s, num_query_mix=s2).negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=0.0)
    )
    assert extra.per_query is None and extra.shared.shape == (s + s2, D)
    ref = np_modified(q, queue, d, chosen)
    np.testing.assert_allclose(extra.shared.numpy(), ref, rtol=0, atol=1e-12)


def test_modified_draws_from_all_queries():
    q, k, queue, queue_labels, _ = inputs(8)
    torch.manual_seed(0)
    chosen = mochi.choose_queries(B, 3000, q.device)
    assert chosen.min() == 0 and chosen.max() == B - 1
    assert (torch.bincount(chosen, minlength=B) > 400).all()


# ---- diagnostics and errors ------------------------------------------------------------------


def hand_made():
    """Four one-hot keys; q0's hard set (N=2) is [e0, e1], q1's is [e2, e3]."""
    queue = torch.eye(4, dtype=torch.float64)
    queue_labels = torch.tensor([0, 1, -1, 2])
    q = F.normalize(torch.tensor([[2.0, 1, 0, 0], [0, 0, 2, 1]], dtype=torch.float64), dim=1)
    d = mochi.Draws(
        torch.tensor([[0, 0], [0, 1]]),  # i
        torch.tensor([[0, 1], [0, 0]]),  # j: pairs q0 (e0,e0) (e0,e1); q1 (e2,e2) (e3,e2)
        torch.full((2, 2), 0.5, dtype=torch.float64),
        torch.tensor([[1, 0], [0, 0]]),  # jq: q0 e1, e0; q1 e2, e2
        torch.full((2, 2), 0.25, dtype=torch.float64),
    )
    return q, queue, queue_labels, d


@pytest.mark.parametrize(
    "labels, fn_mix, fn_qmix",
    [
        # y0 = 1: (e0,e0) no, (e0,e1) yes; e1 yes, e0 no. y1 = 2: (e2,e2) no, (e3,e2) yes; e2 no.
        ([1, 2], 2 / 4, 1 / 4),
        # y1 unknown: a -1 key (e2) with a -1 query is not a same-class pair.
        ([1, -1], 1 / 4, 1 / 4),
        ([0, -1], 2 / 4, 1 / 4),  # y0 = 0: (e0,e0) and (e0,e1) yes; e0 yes
    ],
)
def test_false_negative_fraction_hand_made(monkeypatch, labels, fn_mix, fn_qmix):
    q, queue, queue_labels, d = hand_made()
    supply(monkeypatch, d)
    strategy = negatives.create("mochi", num_hard=2, num_mix=2, num_query_mix=2, warmup_epochs=0)
    strategy.negatives(
        Step.single(
            q=q, k=q, queue=queue, queue_labels=queue_labels, epoch=0.0, labels=torch.tensor(labels)
        )
    )
    diag = strategy.diagnostics()
    assert all(v.dim() == 0 for v in diag.values())
    assert diag["false_neg_mix"].item() == pytest.approx(fn_mix)
    assert diag["false_neg_query_mix"].item() == pytest.approx(fn_qmix)
    assert diag["false_neg"].item() == pytest.approx((fn_mix + fn_qmix) / 2)
    strategy.negatives(
        Step.single(q=q, k=q, queue=queue, queue_labels=queue_labels, epoch=0.0)
    )  # no labels: every label unknown (-1), which is never the same class
    diag = strategy.diagnostics()
    fractions = ("false_neg_mix", "false_neg_query_mix", "false_neg")
    assert [diag[key].item() for key in fractions] == [0.0] * 3


def test_false_negative_fraction_modified(monkeypatch):
    q, queue, queue_labels, d = hand_made()
    # points: h from q1 with (e3, e2); h from q0 with (e0, e1); h' from q0 with e0
    d = mochi.Draws(torch.tensor([[1, 0]]), torch.tensor([[0, 1]]), d.alpha[:1],
                    torch.tensor([[0]]), d.beta[:1, :1])  # fmt: skip
    supply(monkeypatch, d, np.array([1, 0, 0]))
    strategy = negatives.create("modified_mochi", num_hard=2, num_mix=2, num_query_mix=1,
                                warmup_epochs=0)  # fmt: skip
    strategy.negatives(
        Step.single(
            q=q, k=q, queue=queue, queue_labels=queue_labels, epoch=0.0, labels=torch.tensor([1, 2])
        )
    )
    diag = strategy.diagnostics()
    assert diag["false_neg_mix"].item() == pytest.approx(1.0)  # e3 ~ y1 = 2; e1 ~ y0 = 1
    assert diag["false_neg_query_mix"].item() == pytest.approx(0.0)  # e0 (0) vs y0 = 1
    assert diag["false_neg"].item() == pytest.approx(2 / 3)


def test_similarity_diagnostics_match_numpy(monkeypatch):
    q, k, queue, queue_labels, labels = inputs(9)
    d = given_draws(B, 4, 3)
    supply(monkeypatch, d)
    strategy = mochi_(num_mix=4, num_query_mix=3)
    out = strategy.negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=0.0, labels=labels)
    ).per_query.numpy()
    diag, qn, kn = strategy.diagnostics(), q.numpy(), queue.numpy()
    sim = qn @ kn.T
    hard = np_hard(qn, kn, NH)
    per = np.einsum("bd,bsd->bs", qn, out)
    expected = {
        "sim_queue": sim.mean(),
        "sim_hard": np.take_along_axis(sim, hard, 1).mean(),
        "sim_mix": per[:, :4].mean(),
        "sim_query_mix": per[:, 4:].mean(),
    }
    for key, value in expected.items():
        assert diag[key].dim() == 0 and diag[key].item() == pytest.approx(value, abs=1e-12)


def test_hard_set_larger_than_queue_is_an_error():
    q, k, queue, queue_labels, _ = inputs(10)
    strategy = negatives.create("mochi", num_hard=K + 1, warmup_epochs=1.0)
    strategy.negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=0.5)
    )  # warm-up: no hard set needed yet
    with pytest.raises(ValueError, match=rf"num_hard={K + 1} exceeds the queue size K={K}"):
        strategy.negatives(Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=1.0))
    strategy = negatives.create("modified_mochi", num_hard=K + 1, warmup_epochs=0)
    with pytest.raises(ValueError, match=rf"num_hard={K + 1} exceeds the queue size K={K}"):
        strategy.negatives(Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=0.0))
    # N = K is allowed: the hard set is the whole queue
    torch.manual_seed(0)
    out = negatives.create("mochi", num_hard=K, warmup_epochs=0).negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=queue_labels, epoch=0)
    )
    assert out.per_query.shape == (B, 512 + 128, D)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_hard": 0}, "num_hard must be >= 1"),
        ({"num_hard": -1}, "num_hard must be an integer >= 0"),
        ({"num_mix": -1}, "num_mix must be an integer >= 0"),
        ({"num_query_mix": 2.5}, "num_query_mix must be an integer >= 0"),
        ({"num_mix": True}, "num_mix must be an integer >= 0"),
        ({"warmup_epochs": -1}, "warmup_epochs must be >= 0"),
        ({"warmup_epochs": "10"}, "warmup_epochs must be a number"),
        ({"distinct_pair": "yes"}, "distinct_pair must be true or false"),
        ({"distinct_pair": True, "num_hard": 1}, "distinct_pair needs num_hard >= 2"),
    ],
)
@pytest.mark.parametrize("name", ["mochi", "modified_mochi"])
def test_bad_arguments(name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        negatives.create(name, **kwargs)
