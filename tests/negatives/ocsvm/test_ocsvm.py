"""negatives.ocsvm.svm.OneClassSVM against scikit-learn's OneClassSVM (the libsvm it reproduces).

The data imitate MoCo embeddings: unit vectors in d = 128 around a few clusters, the fit set is
cat(q, k) of a batch (two noisy views of each point) and the queue mixes points near the same
clusters with uniform ones. With gamma = 0.01 most queue decision values are below libsvm's 1e-3
tolerance, so agreement in sign needs the solver to stop exactly where libsvm stops.
"""

from __future__ import annotations

import sys

import pytest
import torch
from sklearn.svm import OneClassSVM as SkOneClassSVM

from negatives.ocsvm import smo
from negatives.ocsvm.svm import OneClassSVM
from pretrain.testing.fakedata import embeddings

GRID = [(0.01, 0.01), (0.1, 0.1)]


def sklearn_fit(X, nu, gamma, **kw):
    return SkOneClassSVM(nu=nu, gamma=gamma, **kw).fit(X.double().numpy())


def assert_same_as_sklearn(ours, sk, X, Q):
    assert ours.n_iter_ == sk.n_iter_
    assert torch.equal(ours.support_, torch.from_numpy(sk.support_).long())
    torch.testing.assert_close(ours.dual_coef_, torch.from_numpy(sk.dual_coef_), rtol=0, atol=1e-12)
    torch.testing.assert_close(ours.intercept_, torch.from_numpy(sk.intercept_), rtol=0, atol=1e-12)
    torch.testing.assert_close(ours.offset_, torch.from_numpy(sk.offset_), rtol=0, atol=1e-12)
    assert ours.n_support_.tolist() == sk.n_support_.tolist()
    torch.testing.assert_close(ours.support_vectors_, X.double()[ours.support_])
    f, f_sk = ours.decision_function(Q), torch.from_numpy(sk.decision_function(Q.double().numpy()))
    assert f.dtype == torch.float64 and f.shape == (len(Q),) and f.device == Q.device
    assert (f - f_sk).abs().max() <= 1e-6
    assert torch.equal(f > 0, f_sk > 0), f"{(f > 0).ne(f_sk > 0).sum()} queue points change side"
    assert torch.equal(ours.predict(Q), torch.from_numpy(sk.predict(Q.double().numpy())).long())


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("nu,gamma", GRID)
@pytest.mark.parametrize("n", [64, 256, 1024])
def test_matches_sklearn(n, nu, gamma, seed):
    X, Q = embeddings(n, 3000, seed)
    ours = OneClassSVM(nu=nu, gamma=gamma).fit(X)
    assert_same_as_sklearn(ours, sklearn_fit(X, nu, gamma), X, Q)


def test_queue_is_mostly_below_tolerance():
    """The regime of the paper: most |f| are below tol, the sign is the solver's stopping point."""
    X, Q = embeddings(256, 3000, seed=0)
    f = OneClassSVM().fit(X).decision_function(Q)
    assert (f.abs() < 1e-3).float().mean() > 0.9


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("nu,gamma", GRID)
def test_matches_sklearn_large(nu, gamma, seed):
    X, Q = embeddings(4096, 65536, seed)
    ours = OneClassSVM(nu=nu, gamma=gamma).fit(X)
    assert_same_as_sklearn(ours, sklearn_fit(X, nu, gamma), X, Q)


# Runs long enough (n_iter_ > min(n, 1000)) to call do_shrinking: with a small tol they shrink,
# unshrink (reconstructing the gradient of shrunk variables) and, having stopped on the active
# set, resume after the reconstruction. Duplicated views make exact ties in the gradient, so the
# tie-breaking and the index swaps must be libsvm's as well.
SHRINKING = [  # n, nu, gamma, tol, duplicated views, every shrinking path taken
    (64, 0.1, 0.1, 1e-5, False, True),
    (128, 0.01, 0.01, 1e-7, False, True),
    (256, 0.3, 0.5, 1e-5, False, True),
    (256, 0.1, 0.1, 1e-7, True, True),
    (1200, 0.1, 0.1, 1e-5, False, True),
    (1200, 0.01, 0.01, 1e-6, True, True),
    (128, 0.1, 0.1, 1e-3, False, False),
    (256, 0.1, 0.1, 1e-3, True, False),
]


def record_shrinking(monkeypatch):
    """Wrap the solver's shrinking steps and return the set of paths they take."""
    seen, shrink, reconstruct, select = set(), smo._shrink, smo._reconstruct, smo._select

    def shrink_(o, s, eps):
        A, unshrunk = s.A, s.unshrink
        shrink(o, s, eps)
        seen.add("shrunk" if s.A < A else "kept")
        if s.unshrink > unshrunk and A < s.l:
            seen.add("unshrunk")

    def reconstruct_(o, s):
        seen.add("reconstructed" if s.A < s.l else "nothing to reconstruct")
        reconstruct(o, s)

    def select_(o, s, eps):
        out = select(o, s, eps)
        if "reconstructed" in seen and not bool(out[2]):
            seen.add("resumed")
        return out

    for name, f in (("_shrink", shrink_), ("_reconstruct", reconstruct_), ("_select", select_)):
        monkeypatch.setattr(smo, name, f)
    return seen


@pytest.mark.parametrize("n,nu,gamma,tol,dup,every_path", SHRINKING)
def test_matches_sklearn_with_shrinking_and_ties(n, nu, gamma, tol, dup, every_path, monkeypatch):
    X, Q = embeddings(n, 2000, seed=3, dup=dup)
    seen = record_shrinking(monkeypatch)
    ours = OneClassSVM(nu=nu, gamma=gamma, tol=tol).fit(X)
    assert ours.n_iter_ > min(n, 1000) and "shrunk" in seen
    assert not every_path or {"unshrunk", "reconstructed", "resumed"} <= seen
    assert_same_as_sklearn(ours, sklearn_fit(X, nu, gamma, tol=tol), X, Q)


def assert_same_fit(a, b):
    assert a.n_iter_ == b.n_iter_
    assert torch.equal(a.support_, b.support_)
    assert torch.equal(a.dual_coef_, b.dual_coef_)
    assert torch.equal(a.intercept_, b.intercept_)


@pytest.mark.parametrize("chunk_size", [1, 7, 32])
@pytest.mark.parametrize(
    "n,nu,gamma,tol,dup",
    [(256, 0.01, 0.01, 1e-3, False), (256, 0.1, 0.1, 1e-3, False)] + [c[:5] for c in SHRINKING[:4]],
)
def test_device_loop_equals_host_loop(n, nu, gamma, tol, dup, chunk_size):
    """The chunked, sync-free CUDA loop, run on CPU tensors, takes exactly the host loop's steps."""
    X, _ = embeddings(n, 10, seed=3, dup=dup)
    host = OneClassSVM(nu=nu, gamma=gamma, tol=tol, loop="host").fit(X)
    dev = OneClassSVM(nu=nu, gamma=gamma, tol=tol, loop="device", chunk_size=chunk_size).fit(X)
    assert_same_fit(dev, host)
    assert host.n_syncs_ == 0
    # one check per chunk, plus a few at each shrinking and at the end
    assert dev.n_syncs_ <= host.n_iter_ // chunk_size + 6 * (1 + host.n_iter_ // min(n, 1000)) + 4


@pytest.mark.parametrize(
    "n,nu,gamma,tol",
    [(256, 0.01, 0.01, 1e-3), (256, 0.1, 0.1, 1e-3)] + [c[:4] for c in SHRINKING[1:2]],
)
def test_full_kernel_cache_matches_sklearn(n, nu, gamma, tol):
    """The CUDA configuration (device loop on a precomputed torch kernel), here on the CPU."""
    X, Q = embeddings(n, 3000, seed=3)
    ours = OneClassSVM(nu=nu, gamma=gamma, tol=tol, loop="device", kernel_cache="full").fit(X)
    assert_same_as_sklearn(ours, sklearn_fit(X, nu, gamma, tol=tol), X, Q)
    assert_same_fit(OneClassSVM(nu=nu, gamma=gamma, tol=tol, kernel_cache="full").fit(X), ours)


def test_linear_kernel_matches_sklearn():
    X, Q = embeddings(256, 2000, seed=6)
    ours = OneClassSVM(nu=0.1, kernel="linear").fit(X)
    assert_same_as_sklearn(ours, sklearn_fit(X, 0.1, 0.01, kernel="linear"), X, Q)


def test_large_norms_and_small_chunks_match_sklearn():
    """Norms where exp(2 g sv.y) would overflow take the unfactored kernel; chunks are joined."""
    X, Q = embeddings(128, 1000, seed=13)
    X, Q = 30 * X, 30 * Q  # 2 g |x|^2 = 1800 > 700
    ours = OneClassSVM(nu=0.1, gamma=1.0).fit(X)
    sk = sklearn_fit(X, 0.1, 1.0)
    assert_same_as_sklearn(ours, sk, X, Q)
    torch.testing.assert_close(ours.decision_function(Q, chunk=77), ours.decision_function(Q))


def test_max_iter_stops_like_sklearn():
    X, Q = embeddings(256, 500, seed=7)
    with pytest.warns(RuntimeWarning, match="max_iter"):
        ours = OneClassSVM(nu=0.1, gamma=0.1, max_iter=5).fit(X)
    assert ours.fit_status_ == 1 and ours.n_iter_ == 5
    with pytest.warns(Warning):
        sk = sklearn_fit(X, 0.1, 0.1, max_iter=5)
    assert_same_as_sklearn(ours, sk, X, Q)


def full_alpha(m, n):
    a = torch.zeros(n, dtype=torch.float64)
    a[m.support_] = m.dual_coef_[0]
    return a


@pytest.mark.parametrize("nu,gamma", GRID + [(0.5, 1.0)])
def test_exact_solver_kkt(nu, gamma):
    X, _ = embeddings(256, 10, seed=8)
    n, X64 = len(X), X.double()
    exact = OneClassSVM(nu=nu, gamma=gamma, solver="exact").fit(X)
    a, rho = full_alpha(exact, n), exact.offset_.item()
    K = torch.exp(-gamma * torch.cdist(X64, X64).square())
    G, eps = K @ a, 1e-9
    assert a.min() >= 0 and a.max() <= 1 and abs(a.sum().item() - nu * n) < 1e-9
    free = (a > 0) & (a < 1)
    assert free.any() and ((G[free] - rho).abs() <= eps).all()
    assert (G[a == 0] >= rho - eps).all()
    assert (G[a == 1] <= rho + eps).all()
    a_libsvm = full_alpha(OneClassSVM(nu=nu, gamma=gamma).fit(X), n)
    assert a @ K @ a <= a_libsvm @ K @ a_libsvm + 1e-12
    torch.testing.assert_close(exact.decision_function(X), G - rho, rtol=0, atol=1e-12)


def test_sklearn_backend_same_api():
    X, Q = embeddings(256, 1000, seed=9)
    wrapped = OneClassSVM(backend="sklearn").fit(X)
    assert_same_as_sklearn(wrapped, sklearn_fit(X, 0.01, 0.01), X, Q)
    assert_same_fit(wrapped, OneClassSVM().fit(X))


def test_thundersvm_backend():
    X, Q = embeddings(256, 1000, seed=10)
    try:
        import thundersvm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install thundersvm-cpu"):
            OneClassSVM(backend="thundersvm").fit(X)
        return
    m = OneClassSVM(nu=0.1, gamma=0.1, backend="thundersvm").fit(X)
    sk = sklearn_fit(X, 0.1, 0.1)
    f, f_sk = m.decision_function(Q), torch.from_numpy(sk.decision_function(Q.double().numpy()))
    assert m.dual_coef_.shape == (1, len(m.support_)) and m.n_iter_ == -1
    assert (f - f_sk).abs().max() < 1e-2  # another solver and float32 sums: close, not equal


def test_thundersvm_missing_is_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "thundersvm", None)
    with pytest.raises(ImportError, match="pip install thundersvm-cpu"):
        OneClassSVM(backend="thundersvm").fit(torch.randn(10, 3))


def test_outputs_follow_the_input():
    X, Q = embeddings(64, 100, seed=11)
    m = OneClassSVM(nu=0.1, gamma=0.1).fit(X.double().requires_grad_())
    assert m.support_.dtype == torch.int64 and m.dual_coef_.dtype == torch.float64
    assert m.intercept_.shape == (1,) and m.offset_.shape == (1,) and isinstance(m.n_iter_, int)
    assert set(m.predict(Q).tolist()) <= {-1, 1} and m.predict(Q).dtype == torch.int64
    assert len(m.decision_function(Q[:0])) == 0


@pytest.mark.cuda
@pytest.mark.parametrize("loop", ["auto", "triton_regs"])
@pytest.mark.parametrize("nu,gamma", GRID)
def test_cuda_matches_cpu(nu, gamma, loop):
    X, Q = embeddings(1024, 4096, seed=12)
    cpu = OneClassSVM(nu=nu, gamma=gamma).fit(X)
    gpu = OneClassSVM(nu=nu, gamma=gamma, loop=loop).fit(X.cuda())
    assert gpu.path_ == ("triton" if loop == "auto" else loop)
    assert gpu.support_.is_cuda and gpu.dual_coef_.is_cuda
    assert gpu.n_iter_ == cpu.n_iter_ and torch.equal(gpu.support_.cpu(), cpu.support_)
    assert gpu.n_syncs_ <= gpu.n_iter_ // 32 + 10
    f_gpu = gpu.decision_function(Q.cuda())
    assert f_gpu.is_cuda
    assert torch.equal(f_gpu.cpu() > 0, cpu.decision_function(Q) > 0)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(nu=0.0), "nu must be in"),
        (dict(nu=1.5), "nu must be in"),
        (dict(nu=-0.1), "nu must be in"),
        (dict(gamma=0.0), "gamma must be > 0"),
        (dict(gamma=-1.0), "gamma must be > 0"),
        (dict(kernel="poly"), "unknown kernel 'poly'"),
        (dict(solver="smo"), "unknown solver 'smo'"),
        (dict(backend="cuml"), "unknown backend 'cuml'"),
        (dict(loop="gpu"), "unknown loop 'gpu'"),
        (dict(tol=0.0), "tol must be > 0"),
        (dict(max_iter=-2), "max_iter >= -1"),
        (dict(solver="exact", backend="sklearn"), "needs backend='torch'"),
        (dict(solver="exact", loop="triton"), "loop='triton' runs solver='libsvm'"),
        (dict(backend="sklearn", loop="triton"), "loop='triton' runs solver='libsvm'"),
        (dict(solver="exact", loop="triton_regs"), "loop='triton_regs' runs solver='libsvm'"),
        (dict(backend="sklearn", loop="triton_regs"), "loop='triton_regs' runs solver='libsvm'"),
    ],
)
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        OneClassSVM(**kwargs)


@pytest.mark.parametrize(
    "X,match",
    [
        (torch.randn(1, 4), "n >= 2 points"),
        (torch.randn(0, 4), "n >= 2 points"),
        (torch.randn(8), r"must be \(n, d\)"),
        (torch.tensor([[0.0, 1.0], [float("nan"), 0.0]]), "NaN or infinite"),
        (torch.tensor([[0.0, 1.0], [float("inf"), 0.0]]), "NaN or infinite"),
    ],
)
def test_bad_fit_input(X, match):
    with pytest.raises(ValueError, match=match):
        OneClassSVM().fit(X)


def test_decision_before_fit_and_dimension_mismatch():
    with pytest.raises(ValueError, match="not fitted yet"):
        OneClassSVM().decision_function(torch.randn(3, 4))
    with pytest.raises(ValueError, match="not fitted yet"):
        OneClassSVM().predict(torch.randn(3, 4))
    m = OneClassSVM().fit(torch.randn(10, 4))
    with pytest.raises(ValueError, match=r"Y must be \(m, 4\)"):
        m.decision_function(torch.randn(3, 5))


def test_nu_one_has_no_finite_rho():
    """Every alpha at its bound leaves rho undefined; scikit-learn raises too."""
    with pytest.raises(ValueError, match="rho is infinite"):
        OneClassSVM(nu=1.0).fit(torch.randn(10, 4))


@pytest.mark.parametrize("nu", [0.01, 0.1, 1 / 3, 0.5, 0.77, 0.999])
@pytest.mark.parametrize("n", [2, 7, 32, 1001])
def test_triton_constants_are_built_on_the_device_without_host_data(nu, n):
    """The Triton fit's per-device constants come from tensor ops on the device (no host data
    copied: a sync on CUDA), equal to libsvm's start bit for bit (smo.initial_alpha); prepare()
    builds them before any fit (MiOC at setup and .to())."""
    from negmine_core.contract.sync_counter import SyncCounter

    svm = OneClassSVM(nu=nu, gamma=0.3, tol=1e-4)
    with SyncCounter() as syncs:
        svm.prepare("cpu", n)
    assert syncs.count == 0, syncs.report()
    dev = torch.device("cpu")
    alpha0, n_init = svm._constant(dev, "alpha0", n)
    want = smo.initial_alpha(nu, n)
    assert alpha0.dtype == torch.float64 and alpha0.numpy().tobytes() == want.tobytes()
    assert n_init == int((want > 0).sum())
    assert svm._constant(dev, "params", 0)[0].tolist() == [1e-4, smo._TAU]
    assert svm._constant(dev, "gamma", 0)[0].tolist() == [0.3]
    assert torch.equal(svm._constant(dev, "ones", n)[0], torch.ones(n, dtype=torch.float64))
    assert len(svm.__dict__["_constants"]) == 5  # all built by prepare: none left for a step


def test_the_first_shrink_is_at_iteration_n_plus_1():
    """libsvm's shrinking counter starts at ``min(l, 1000) + 1``: 16 points whose fit changes
    when the first ``do_shrinking`` comes one iteration earlier (``min(l, 1000)``: 34 iterations
    instead of scikit-learn's 33). The same case runs the Triton kernel in
    ``tests/negatives/ocsvm/test_ocsvm_triton_libsvm.py`` (``first_shrink``)."""
    X, _ = embeddings(n_fit=16, n_queue=50, seed=5)
    sk = sklearn_fit(X, 0.3, 0.1, tol=1e-5)
    ours = OneClassSVM(loop="host", nu=0.3, gamma=0.1, tol=1e-5).fit(X)
    assert ours.n_iter_ == sk.n_iter_ == 33 > 16
    assert torch.equal(torch.as_tensor(ours.support_).long(), torch.from_numpy(sk.support_).long())
    device = OneClassSVM(loop="device", nu=0.3, gamma=0.1, tol=1e-5).fit(X)
    assert device.n_iter_ == sk.n_iter_
