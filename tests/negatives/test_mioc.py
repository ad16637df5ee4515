"""MiOC (Jain et al. 2025) against independent references: scikit-learn's OneClassSVM decides O, and
every synthetic point is decomposed back into (query, queue key, beta) with numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.svm import OneClassSVM as SkOneClassSVM

import negatives
from negatives.base import Step
from negatives.mioc import MiOC, sample_mask
from pretrain import build, config
from pretrain.config import ConfigError
from pretrain.losses import moco_logits
from tests.helpers import ocsvm_triton_worker
from tests.helpers.troubleshooting_quotes import assert_documented

B, D, K = 8, 16, 64


def clustered(n: int, centers: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    x = centers[rng.integers(len(centers), size=n)] + noise * rng.standard_normal((n, D))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((3, D))
    q = clustered(B, centers, 0.3, rng)
    k = q + 0.05 * rng.standard_normal(q.shape).astype(np.float32)
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    queue = np.concatenate(
        [clustered(K // 2, centers, 0.3, rng), clustered(K // 2, centers, 3.0, rng)]
    )
    return torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(queue)


def decompose(points: np.ndarray, a: np.ndarray, b: np.ndarray) -> list[tuple[int, int, float]]:
    """For each point p find (i, j, w) with p = normalize(w a_i + (1 - w) b_j), by least squares
    of p on span(a_i, b_j) for every pair at once (batched normal equations)."""
    basis = np.stack(np.broadcast_arrays(a[:, None], b[None, :]), axis=-1).astype(np.float64)
    basis = basis.reshape(-1, a.shape[1], 2)  # (pairs, D, 2)
    gram = np.einsum("pdi,pdj->pij", basis, basis)
    out = []
    for p in points.astype(np.float64):
        rhs = np.einsum("pdi,d->pi", basis, p)[..., None]
        coef = np.linalg.solve(gram + 1e-12 * np.eye(2), rhs)[..., 0]  # (pairs, 2); ridge: i == j
        err = np.linalg.norm(np.einsum("pdi,pi->pd", basis, coef) - p, axis=1)
        best = int(err.argmin())
        assert err[best] < 1e-5, f"point is not a mixture of the two sets (residual {err[best]})"
        (wa, wb), (i, j) = coef[best], divmod(best, len(b))
        out.append((i, j, wa / (wa + wb)))
    return out


def sklearn_inliers(fit: np.ndarray, queue: np.ndarray, nu: float, gamma: float) -> np.ndarray:
    svm = SkOneClassSVM(kernel="rbf", nu=nu, gamma=gamma).fit(fit)
    return svm.decision_function(queue) > 0


@pytest.mark.parametrize(("nu", "gamma"), [(0.1, 0.1), (0.01, 0.01)])
def test_synthetic_points_follow_the_paper(batch, nu, gamma):
    q, k, queue = batch
    s_n, s_o = 12, 10
    mioc = MiOC(num_synthetic=s_n, num_inlier_synthetic=s_o, nu=nu, gamma=gamma, warmup_epochs=1)
    torch.manual_seed(0)
    extra = mioc.negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=torch.full((K,), -1), epoch=5.0)
    )
    shared = extra.shared.numpy()
    assert extra.per_query is None and shared.shape == (s_n + s_o, D)
    np.testing.assert_allclose(np.linalg.norm(shared, axis=1), 1.0, atol=1e-6)

    inlier = sklearn_inliers(torch.cat([q, k]).numpy(), queue.numpy(), nu, gamma)
    parts = decompose(shared, q.numpy(), queue.numpy())
    betas = np.array([beta for _, _, beta in parts])
    assert ((0 <= betas) & (betas < 0.5)).all()  # the query's weight is below one half
    s_o_keys = [j for _, j, _ in parts[s_n:]]
    assert inlier.any(), "the fixture must give a non-empty O, or S_o is not checked"
    assert all(inlier[j] for j in s_o_keys), "S_o must mix queries with keys of O only"
    assert float(mioc.diagnostics()["inliers"]) == inlier.sum()


def test_inlier_count_matches_sklearn(batch):
    q, k, queue = batch
    for nu, gamma in [(0.1, 0.1), (0.5, 1.0)]:
        mioc = MiOC(num_synthetic=4, num_inlier_synthetic=4, nu=nu, gamma=gamma, warmup_epochs=0)
        mioc.negatives(
            Step.single(q=q, k=k, queue=queue, queue_labels=torch.full((K,), -1), epoch=0.0)
        )
        expected = sklearn_inliers(torch.cat([q, k]).numpy(), queue.numpy(), nu, gamma).sum()
        assert float(mioc.diagnostics()["inliers"]) == expected


def test_warmup_paper_makes_only_s_n_and_code_adds_m_n(batch):
    q, k, queue = batch
    paper = MiOC(num_synthetic=6, num_inlier_synthetic=5, warmup_epochs=2)
    extra = paper.negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=torch.full((K,), -1), epoch=1.5)
    )
    assert extra.shared.shape == (6, D)
    decompose(extra.shared.numpy(), q.numpy(), queue.numpy())  # all query-key mixtures
    assert "inliers" not in paper.diagnostics()  # no OC-SVM during the paper's warm-up

    code = MiOC(num_synthetic=6, num_inlier_synthetic=5, warmup_epochs=2, warmup="code")
    extra = code.negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=torch.full((K,), -1), epoch=1.5)
    )
    assert extra.shared.shape == (6 + 5, D)
    m_n = decompose(extra.shared[:6].numpy(), queue.numpy(), queue.numpy())  # two queue keys
    assert all(0 <= alpha <= 1 for _, _, alpha in m_n)  # alpha ~ U(0, 1)
    decompose(extra.shared[6:].numpy(), q.numpy(), queue.numpy())  # then S_n


def test_zero_synthetic_gives_plain_moco_logits(batch):
    q, k, queue = batch
    mioc = MiOC(num_synthetic=0, num_inlier_synthetic=0, warmup_epochs=0)
    extra = mioc.negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=torch.full((K,), -1), epoch=3.0)
    )
    assert extra.shared is None
    assert torch.equal(moco_logits(q, k, queue, 0.2, extra.shared, extra.per_query),
                       moco_logits(q, k, queue, 0.2))  # fmt: skip


def test_beta_zero_gives_the_queue_keys_themselves(batch):
    q, k, queue = batch
    mioc = MiOC(num_synthetic=16, num_inlier_synthetic=0, warmup_epochs=0, beta_max=0.0)
    shared = mioc.negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=torch.full((K,), -1), epoch=3.0)
    ).shared
    sims = shared @ queue.T  # every synthetic point is exactly one queue key
    assert torch.allclose(sims.max(dim=1).values, torch.ones(16), atol=1e-6)


def test_no_gradient_reaches_queries_through_synthetic_points(batch):
    q, k, queue = batch
    q = q.clone().requires_grad_(True)
    torch.manual_seed(1)
    step = Step.single(q=q.detach(), k=k, queue=queue, queue_labels=torch.full((K,), -1),
                          epoch=1.0)  # fmt: skip
    extra = MiOC(num_synthetic=8, num_inlier_synthetic=4, warmup_epochs=0).negatives(step)
    assert not extra.shared.requires_grad
    loss = F.cross_entropy(moco_logits(q, k, queue, 0.2, extra.shared), torch.zeros(B).long())
    loss.backward()
    q2 = q.detach().clone().requires_grad_(True)
    const = extra.shared.clone()
    F.cross_entropy(moco_logits(q2, k, queue, 0.2, const), torch.zeros(B).long()).backward()
    assert torch.allclose(q.grad, q2.grad)


def test_sample_mask_draws_only_true_entries_and_falls_back_when_empty():
    torch.manual_seed(0)
    mask = torch.zeros(50, dtype=torch.bool)
    mask[[3, 17, 42]] = True
    fallback = torch.full((3000,), -1)
    idx, count = sample_mask(mask, fallback)
    assert idx is fallback and int(count) == 3 and set(idx.tolist()) == {3, 17, 42}
    freq = np.bincount(idx.numpy(), minlength=50)[[3, 17, 42]] / 3000
    np.testing.assert_allclose(freq, 1 / 3, atol=0.04)  # uniform over O (binomial sd 0.009)
    fallback = torch.randint(50, (500,))
    idx, count = sample_mask(torch.zeros(50, dtype=torch.bool), fallback.clone())
    assert int(count) == 0 and torch.equal(idx, fallback)  # empty O: the caller's draws
    mask[-1] = True  # the last position: u c never reaches c (see below), nor past K - 1
    assert set(sample_mask(mask, torch.zeros(3000, dtype=torch.long))[0].tolist()) <= {
        3, 17, 42, 49}  # fmt: skip


def test_sample_mask_float32_draw_stays_below_the_count():
    """sample_mask needs no clamp: torch's largest float32 uniform, 1 - 2^-24, times any integer
    count c <= 2^24 rounds (float32, to nearest) below c, so the position found is < K."""
    largest = torch.rand(1 << 20).max()  # one of torch's own draws, below 1
    assert float(largest) <= 1 - 2**-24
    u = np.float32(1 - 2**-24)
    for start in range(1, (1 << 24) + 1, 1 << 22):
        c = np.arange(start, min(start + (1 << 22), (1 << 24) + 1), dtype=np.float32)
        assert (u * c < c).all()


def test_empty_inliers_policies(batch):
    q, k, queue = batch
    far = -q[:1].expand(K, D).contiguous()  # a queue opposite the batch: f < 0 everywhere
    for policy, size in [("queue", 6 + 4), ("skip", 6)]:
        mioc = MiOC(num_synthetic=6, num_inlier_synthetic=4, nu=0.1, gamma=0.1, warmup_epochs=0,
                    empty_inliers=policy)  # fmt: skip
        extra = mioc.negatives(
            Step.single(q=q, k=k, queue=far, queue_labels=torch.full((K,), -1), epoch=1.0)
        )
        assert extra.shared.shape == (size, D)
        assert int(mioc.diagnostics()["empty_inlier_steps"]) == 1


def test_false_negative_fraction_diagnostic(batch):
    q, k, queue = batch
    labels = torch.zeros(B, dtype=torch.long)
    same = MiOC(num_synthetic=5, num_inlier_synthetic=5, warmup_epochs=0)
    same.negatives(
        Step.single(
            q=q,
            k=k,
            queue=queue,
            queue_labels=torch.zeros(K, dtype=torch.long),
            epoch=1.0,
            labels=labels,
        )
    )
    assert float(same.diagnostics()["false_negative_fraction"]) == 1.0
    other = MiOC(num_synthetic=5, num_inlier_synthetic=5, warmup_epochs=0)
    other.negatives(
        Step.single(
            q=q, k=k, queue=queue, queue_labels=torch.full((K,), -1), epoch=1.0, labels=labels
        )
    )  # unknown labels never count
    assert float(other.diagnostics()["false_negative_fraction"]) == 0.0


def test_registry_and_validation():
    assert "mioc" in negatives.list_strategies()
    assert isinstance(negatives.create("mioc", nu=0.1, gamma=None), MiOC)
    with pytest.raises(ValueError, match="num_synthetic must be a non-negative int"):
        MiOC(num_synthetic=-1)
    with pytest.raises(ValueError, match="warmup must be 'paper' or 'code'"):
        MiOC(warmup="later")
    with pytest.raises(ValueError, match="empty_inliers"):
        MiOC(empty_inliers="crash")
    with pytest.raises(ValueError, match="nu"):
        MiOC(nu=1.5)


def test_similarity_diagnostics_equal_the_mean_over_all_pairs(batch):
    q, k, queue = batch
    mioc = MiOC(num_synthetic=7, num_inlier_synthetic=5, warmup_epochs=0, nu=0.1, gamma=0.1)
    shared = mioc.negatives(
        Step.single(q=q, k=k, queue=queue, queue_labels=torch.full((K,), -1), epoch=1.0)
    ).shared
    d = mioc.diagnostics()
    qn, sn = q.double().numpy(), shared.double().numpy()
    np.testing.assert_allclose(
        float(d["qn_queue"]), (qn @ queue.double().numpy().T).mean(), atol=1e-6
    )
    np.testing.assert_allclose(float(d["qn_s_n"]), (qn @ sn[:7].T).mean(), atol=1e-6)
    np.testing.assert_allclose(float(d["qn_s_o"]), (qn @ sn[7:].T).mean(), atol=1e-6)


def test_device_path_inliers_match_sklearn_with_no_host_sync(batch, tmp_path):
    """MiOC's CUDA path (the OC-SVM as one Triton program; Triton's interpreter without a GPU):
    O equals scikit-learn's, both ``empty_inliers`` policies hold on an empty O, and the step
    makes no host sync with the default policy ("skip" needs one, to know the shape)."""
    q, k, queue = batch
    far = -q[:1].expand(K, D).contiguous()  # a queue opposite the batch: f < 0 everywhere
    kw = {"num_synthetic": 6, "num_inlier_synthetic": 4, "nu": 0.1, "gamma": 0.1}
    kw["warmup_epochs"] = 0
    nan_q = q.clone()
    nan_q[3, 5] = float("nan")
    cases = [{"q": a.tolist(), "k": k.tolist(), "queue": keys.tolist(), "kwargs": kw}
             for a, keys in ((q, queue), (q, far), (nan_q, queue))]  # fmt: skip
    found, empty, bad = ocsvm_triton_worker.run(cases, tmp_path)
    inlier = sklearn_inliers(torch.cat([q, k]).numpy(), queue.numpy(), 0.1, 0.1)
    assert inlier.any() and not inlier.all()
    for policy in ("queue", "skip"):
        got = found[policy]
        assert np.array_equal(got["mask"].numpy(), inlier)
        assert got["inliers"] == inlier.sum() and got["empty_steps"] == 0
        assert got["shared"] == (6 + 4, D)
    assert found["queue"]["count"] == 0, found["queue"]["syncs"]
    assert found["skip"]["count"] == 1  # bool(n_o > 0)
    assert not sklearn_inliers(torch.cat([q, k]).numpy(), far.numpy(), 0.1, 0.1).any()
    for policy, size in (("queue", 6 + 4), ("skip", 6)):
        got = empty[policy]
        assert not got["mask"].any() and got["inliers"] == 0
        assert got["shared"] == (size, D) and got["empty_steps"] == 1
    assert empty["queue"]["count"] == 0, empty["queue"]["syncs"]
    assert found["queue"]["bad_input"] == "" and found["queue"]["finite_output"]
    # non-finite embeddings: no host check; no inliers; fit_inliers + negatives count 2 steps
    assert bad["queue"]["count"] == 0 and not bad["queue"]["mask"].any()
    assert (
        "input embeddings cat(q, k) were non-finite (NaN or inf) at 2 step(s)"
        in bad["queue"]["bad_input"]
    )


def test_non_finite_embeddings_are_named_by_the_trainers_check(batch, tmp_path):
    """loop.check_finite (at log steps) puts the strategy's bad_input before its message;
    on the CPU host loop the fit raises at once, as before."""
    from types import SimpleNamespace

    from pretrain.engine import loop

    q, k, queue = batch
    mioc = MiOC(num_synthetic=4, num_inlier_synthetic=4, nu=0.1, gamma=0.1, warmup_epochs=0)
    bad = q.clone()
    bad[0, 0] = float("inf")
    with pytest.raises(ValueError, match="NaN or infinite"):
        mioc.negatives(
            Step.single(q=bad, k=k, queue=queue, queue_labels=torch.full((K,), -1), epoch=1.0)
        )
    mioc.nonfinite_steps += 2  # what the device path counts
    state = SimpleNamespace(bad_loss=torch.tensor(True), global_step=40, epoch=0, saved_step=-1)
    run = SimpleNamespace(
        state=state, strategy=mioc, run_dir=tmp_path, autocast=lambda: None, watch=None
    )  # a Run without per-step checks
    with pytest.raises(loop.NonFiniteLossError) as err:
        loop.check_finite(run)
    msg = str(err.value)
    assert msg.startswith("MiOC: the OC-SVM's input embeddings cat(q, k) were non-finite")
    assert "at 2 step(s)" in msg and "non-finite loss at or before global step 40" in msg


def test_selection_queue_ablation_draws_s_o_from_the_whole_queue_without_a_fit(batch, monkeypatch):
    """The ablation "MiOC without the OC-SVM's selection": no fit, S_o keys uniform over the
    whole queue, the same logit count as MiOC; against a queue where MiOC's O is empty."""
    q, k, queue = batch
    far = F.normalize(-q[:1] + 0.3 * torch.randn(K, D), dim=1)  # opposite the batch: f < 0
    step = Step.single(q=q, k=k, queue=far, queue_labels=torch.full((K,), -1), epoch=1.0)
    assert not sklearn_inliers(torch.cat([q, k]).numpy(), far.numpy(), 0.1, 0.1).any()
    mioc = MiOC(num_synthetic=4, num_inlier_synthetic=3000, nu=0.1, gamma=0.1, warmup_epochs=0,
                beta_max=0.0, selection="queue")  # fmt: skip
    monkeypatch.setattr(mioc.svm, "fit", lambda *a, **kw: pytest.fail("the ablation fitted"))
    torch.manual_seed(0)
    shared = mioc.negatives(step).shared
    assert shared.shape == (4 + 3000, D)
    key = (shared[4:] @ far.T).argmax(1)  # beta 0: each S_o point is one queue key
    assert torch.allclose(shared[4:], far[key], atol=1e-6)
    counts = np.bincount(key.numpy(), minlength=K)
    assert (counts > 0).all()  # every key drawn (a miss has probability ~ 64 e^-47)
    stats = mioc.diagnostics()
    assert stats["inlier_fraction"] == 1.0 and int(stats["empty_inlier_steps"]) == 0
    with pytest.raises(ValueError, match="selection must be"):
        MiOC(selection="all")


@pytest.mark.parametrize("nu", ["0", "-0.5"])
def test_mioc_names_its_own_nu_range_for_every_value_outside_it(nu):
    with pytest.raises(ConfigError) as info:
        build.strategy(config.load("digits_mioc.yaml", [f"negatives.kwargs.nu={nu}"]))
    message = str(info.value)
    assert message == (
        f"negatives: nu must lie in (0, 1) for MiOC, got {float(nu)}: the share of points the "
        "one-class SVM may call outliers (the paper uses 0.01)"
    )
    assert_documented(message)
