"""The one-program Triton OC-SVM solvers (``OneClassSVM(loop="triton")``, the CUDA default, and
``loop="triton_regs"``, its state in registers) against scikit-learn's OneClassSVM (libsvm with
shrinking, its default): each case runs on both loops.

Without a GPU the Triton program runs in Triton's interpreter on CPU tensors: it needs
TRITON_INTERPRET=1 before triton is imported, so the fits run in one subprocess
(``tests/helpers/ocsvm_triton_worker.py``); with a GPU the same worker runs the compiled kernel. The
interpreter costs ~20 ms per SMO iteration, so the cases are small (n <= 256), each picked so
that it tests something: the iterations pass min(n, 1000) (libsvm shrinks), duplicated points
(exact ties: which duplicate is picked depends on libsvm's index swaps) where skipping shrinking
changes the support set, nu * n integral, the linear kernel, max_iter, and non-finite input.
Details of libsvm that these cases cannot tell apart (unshrinking, be_shrunk's bound, the tie rule
across blocks of 1,024) have their own cases in
``tests/negatives/ocsvm/test_ocsvm_triton_libsvm.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.svm import OneClassSVM as SkOneClassSVM

from pretrain.testing.fakedata import embeddings
from tests.helpers import ocsvm_triton_worker
from tests.helpers.triton_launches import installed_ptx

pytestmark = pytest.mark.early  # among the suite's longest files: started first (tests/conftest.py)

LOOPS = ("triton", "triton_regs")
NAN_X = [[0.0, 1.0], [float("nan"), 0.0], [1.0, 0.0], [0.6, 0.8]]
CASES = {  # name: (fakedata.embeddings recipe, OneClassSVM kwargs)
    "mioc_default_256": ({"n_fit": 256, "n_queue": 3000, "seed": 0}, {"nu": 0.01, "gamma": 0.01}),
    "basic": ({"n_fit": 64, "n_queue": 1000, "seed": 3}, {"nu": 0.1, "gamma": 0.1}),
    "shrinking": (
        {"n_fit": 64, "n_queue": 1000, "seed": 3},
        {"nu": 0.1, "gamma": 0.1, "tol": 1e-5},
    ),
    "ties_shrinking": (
        {"n_fit": 64, "n_queue": 1000, "seed": 4, "dup": True},
        {"nu": 0.1, "gamma": 0.1, "tol": 1e-5},
    ),
    "ties_128": (
        {"n_fit": 128, "n_queue": 1000, "seed": 3, "dup": True},
        {"nu": 0.1, "gamma": 0.1},
    ),
    "nu_n_integral": ({"n_fit": 64, "n_queue": 1000, "seed": 5}, {"nu": 0.25, "gamma": 0.5}),
    "linear": ({"n_fit": 64, "n_queue": 500, "seed": 6}, {"nu": 0.1, "kernel": "linear"}),
    "max_iter": (
        {"n_fit": 64, "n_queue": 500, "seed": 7},
        {"nu": 0.1, "gamma": 0.1, "max_iter": 5},
    ),
    "no_shrinking": (
        {"n_fit": 64, "n_queue": 1000, "seed": 4, "dup": True},
        {"nu": 0.1, "gamma": 0.1, "tol": 1e-5, "shrinking": False},
    ),
}


@pytest.fixture(scope="module")
def fitted(all_fits) -> dict[tuple[str, str], dict]:
    """(loop, case name) -> the worker's result."""
    return all_fits["fits"]


def sklearn_fit(recipe: dict, kwargs: dict) -> tuple[SkOneClassSVM, torch.Tensor]:
    X, Y = embeddings(**recipe)
    kw = {"gamma": 0.01, "tol": 1e-3, "shrinking": True, "max_iter": -1} | kwargs
    with np.errstate(all="ignore"), pytest.warns(Warning) if "max_iter" in kwargs else _null():
        sk = SkOneClassSVM(**kw).fit(X.double().numpy())
    return sk, Y


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("name", list(CASES))
def test_matches_sklearn(fitted, name, loop):
    recipe, kwargs = CASES[name]
    got = fitted[loop, name]
    sk, Y = sklearn_fit(recipe, kwargs)
    assert got["n_iter"] == sk.n_iter_ and got["stats"]["solver_iterations"] == sk.n_iter_
    assert torch.equal(got["support"], torch.from_numpy(sk.support_).long())
    assert got["stats"]["support_vectors"] == len(sk.support_)
    alpha = torch.zeros_like(got["alpha"])
    alpha[sk.support_] = torch.from_numpy(sk.dual_coef_[0])
    torch.testing.assert_close(got["alpha"], alpha, rtol=0, atol=1e-12)
    torch.testing.assert_close(
        got["intercept"], torch.from_numpy(sk.intercept_), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(got["rho"], torch.from_numpy(sk.offset_), rtol=0, atol=1e-12)
    f_sk = torch.from_numpy(sk.decision_function(Y.double().numpy()))
    assert got["f"].dtype == torch.float64 and got["f"].shape == f_sk.shape
    assert (got["f"] - f_sk).abs().max() <= 1e-6
    assert torch.equal(got["f"] > 0, f_sk > 0), f"{(got['f'] > 0).ne(f_sk > 0).sum()} change side"
    assert torch.equal(got["predict"], torch.from_numpy(sk.predict(Y.double().numpy())).long())
    assert got["n_syncs"] == 0 and not got["nonfinite"]


@pytest.mark.parametrize("loop", LOOPS)
def test_cases_exercise_what_they_claim(all_fits, loop):
    """The shrinking cases run past min(n, 1000) iterations; with duplicates, skipping shrinking
    would pick other support vectors (so the match above needs libsvm's swaps); nu * n = 16."""
    fitted = {name: got for (lp, name), got in all_fits["fits"].items() if lp == loop}
    for name in ("shrinking", "ties_shrinking", "ties_128", "nu_n_integral"):
        recipe, kwargs = CASES[name]
        assert fitted[name]["n_iter"] > recipe["n_fit"], name
    recipe, kwargs = CASES["ties_shrinking"]
    no_shrink, _ = sklearn_fit(recipe, kwargs | {"shrinking": False})
    assert not np.array_equal(no_shrink.support_, fitted["ties_shrinking"]["support"].numpy())
    assert CASES["nu_n_integral"][1]["nu"] * CASES["nu_n_integral"][0]["n_fit"] == 16
    assert fitted["max_iter"]["status"] == 1 and fitted["max_iter"]["stats"]["max_iter_reached"]
    assert any("max_iter" in w for w in fitted["max_iter"]["warnings"])


@pytest.mark.parametrize("loop", LOOPS)
def test_non_finite_input_is_flagged_not_synced(fitted, loop):
    """No host check inside fit: a device flag, NaN decision values (no inliers), and the CPU
    path's error when a host attribute is read."""
    got = fitted[loop, "nonfinite"]
    assert got["nonfinite"] and got["n_syncs"] == 0
    assert torch.isnan(got["f"]).all() and (got["predict"] == -1).all()
    assert got["error"] == "X contains NaN or infinite values"


KERNEL_CASES = {  # name: kernel_inputs' case; sizes off the kernels' tiles (64 and 32 wide)
    "rbf_tails": {"n": 70, "d": 37, "m": 130, "dtype": "float32", "support": [0, 5, 69]},
    "rbf_d2_f64": {"n": 16, "d": 2, "m": 65, "dtype": "float64", "support": list(range(16))},
    "rbf_d128_zero_blocks": {
        "n": 200, "d": 128, "m": 64, "dtype": "float32", "support": [1, 150, 199]},
    "rbf_strided_bf16": {
        "n": 40, "d": 20, "m": 70, "dtype": "bfloat16", "strided": True, "support": [3, 39]},
    "linear": {"n": 70, "d": 33, "m": 10, "dtype": "float32", "support": [2], "linear": True},
    "bad_rows": {
        "n": 70, "d": 9, "m": 10, "dtype": "float32", "support": [0], "nan_rows": [4, 66, 67]},
}  # fmt: skip


@pytest.fixture(scope="module")
def kernel_results(all_fits) -> dict[str, tuple[dict, dict]]:
    return all_fits["kernels"]


@pytest.fixture(scope="module")
def all_fits(tmp_path_factory) -> dict[str, dict]:
    """Every fit of CASES (and non-finite input) on each loop of LOOPS, every kernel case and
    MiOC's fit at the sizes of SIZES not marked slow (on each loop), in one worker process: its
    start and triton's interpreted setup cost more than most cases (~10 s on 2 cores). Named to
    sort first, so that every test using one of its parts runs on the pytest-xdist worker that
    built it (tests/conftest.py)."""
    nan_case = {"X": NAN_X, "Y": [[0.0, 1.0], [1.0, 0.0]], "kwargs": {"nu": 0.5, "gamma": 1.0}}
    names = [(loop, name) for loop in LOOPS for name in [*CASES, "nonfinite"]]
    fits = [
        {"recipe": CASES[name][0], "kwargs": CASES[name][1] | {"loop": loop}}
        if name in CASES
        else nan_case | {"kwargs": nan_case["kwargs"] | {"loop": loop}}
        for loop, name in names
    ]
    kernels = [{"kernels": case | {"seed": i, "gamma": 0.3}} for i, case in
               enumerate(KERNEL_CASES.values())]  # fmt: skip
    sizes = [n for n, slow in SIZES.items() if not slow]
    sizes = [(loop, n) for loop in LOOPS for n in sizes]
    mioc = [{"recipe": mioc_recipe(n), "kwargs": MIOC_KWARGS | {"loop": loop}} for loop, n in sizes]
    results = ocsvm_triton_worker.run([*fits, *kernels, *mioc], tmp_path_factory.mktemp("triton"))
    got_fits, got_kernels = results[: len(fits)], results[len(fits) : len(fits) + len(kernels)]
    return {
        "fits": dict(zip(names, got_fits, strict=True)),
        "kernels": {
            name: (case["kernels"], got)
            for name, case, got in zip(KERNEL_CASES, kernels, got_kernels, strict=True)
        },  # fmt: skip
        "mioc": dict(zip(sizes, results[len(fits) + len(kernels) :], strict=True)),
    }


@pytest.mark.parametrize("name", list(KERNEL_CASES))
def test_gram_and_score_kernels_match_numpy(kernel_results, name):
    """The Gram kernel against libsvm's kernel_rbf re-derived in float64 numpy (then float32, as
    libsvm's Qfloat), |x|^2 and the per-point input check; the scoring kernel against f(y) =
    sum_i a_i exp(-g |sv_i - y|^2) - rho in float64 and its sign. One op each, no host sync."""
    case, got = kernel_results[name]
    t = {k: v.double().numpy() for k, v in ocsvm_triton_worker.kernel_inputs(case).items()}
    X, Y, coef, rho, g = t["X"], t["Y"], t["coef"], float(t["rho"][0]), case["gamma"]
    bad = ~np.isfinite(X).all(1)
    np.testing.assert_array_equal(np.isnan(got["bad"].numpy()), bad)
    assert (got["bad"].numpy()[~bad] == 0).all()
    ok = ~bad  # the reference on the finite points
    sq = np.einsum("ij,ij->i", X[ok], X[ok])
    np.testing.assert_allclose(got["sq"].numpy()[ok], sq, rtol=1e-14)
    dots = X[ok] @ X[ok].T
    ref = dots if case.get("linear") else np.exp(-g * ((sq[:, None] + sq[None, :]) - 2 * dots))
    Q = got["Q"].numpy()[np.ix_(ok, ok)]
    assert got["Q"].dtype == torch.float32
    np.testing.assert_allclose(Q, ref.astype(np.float32), rtol=2**-23, atol=1e-30)  # <= 1 ulp
    assert (Q == ref.astype(np.float32)).mean() > 0.99  # float32 rounding of the same value
    assert got["ops"] == 2 and got["syncs"] == 0
    f, mask = got["f"].numpy(), got["mask"].numpy()
    if bad.any():  # a non-finite support vector: NaN scores (the fit's rho is NaN then anyway)
        return
    if case.get("linear"):
        return  # the scoring kernel is the RBF's (a linear fit is scored by decision_function)
    d2 = (X**2).sum(1)[:, None] + (Y**2).sum(1)[None, :] - 2 * X @ Y.T
    f_ref = coef @ np.exp(-g * d2) - rho
    np.testing.assert_allclose(f, f_ref, rtol=1e-13, atol=1e-14)
    decided = np.abs(f_ref) > 1e-12
    np.testing.assert_array_equal(mask[decided], f_ref[decided] > 0)
    assert 0 < mask.sum() < len(mask), "the case must have inliers and outliers"


SLOW_CASES = {  # long runs through shrinking, unshrinking and reconstruction (minutes interpreted)
    "tol_1e-7": (
        {"n_fit": 128, "n_queue": 2000, "seed": 3},
        {"nu": 0.01, "gamma": 0.01, "tol": 1e-7},
    ),
    "ties_256_tol_1e-7": (
        {"n_fit": 256, "n_queue": 2000, "seed": 3, "dup": True},
        {"nu": 0.1, "gamma": 0.1, "tol": 1e-7},
    ),
}


SIZES = {  # MiOC's fit sizes: the CIFAR recipe's 2 x 512, 16 GPUs x 256, 64 GPUs x 256
    1024: False,  # ~8 s interpreted
    4096: True,  # ~25 s
    16384: True,  # ~2 min and a 1 GiB kernel matrix
}
MIOC_KWARGS = {"nu": 0.01, "gamma": 0.01}


def mioc_recipe(n: int) -> dict:
    return {"n_fit": n, "n_queue": 4096, "seed": 0}


@pytest.mark.parametrize(
    ("loop", "n"),
    [pytest.param(loop, n, marks=[pytest.mark.slow] if slow else [])
     for loop in LOOPS for n, slow in SIZES.items() if loop == "triton" or n <= 1024],
)  # fmt: skip
def test_matches_sklearn_at_mioc_sizes(tmp_path, loop, n, all_fits):
    """MiOC's defaults (nu = gamma = 0.01) on n fitted points: scikit-learn's iterations,
    support set and decision values on 4,096 queue keys (max |df| was 1.6e-14 at 1,024, 7.1e-14
    at 4,096 and 2.8e-13 at 16,384 with 90, 164 and 156 iterations); ``triton_regs`` runs up to
    1,024 points."""
    recipe, kwargs = mioc_recipe(n), MIOC_KWARGS
    if SIZES[n]:  # a slow size: its own worker
        case = {"recipe": recipe, "kwargs": kwargs | {"loop": loop}}
        (got,) = ocsvm_triton_worker.run([case], tmp_path)
    else:
        got = all_fits["mioc"][loop, n]
    sk, Y = sklearn_fit(recipe, kwargs)
    assert got["n_iter"] == sk.n_iter_
    assert torch.equal(got["support"], torch.from_numpy(sk.support_).long())
    f_sk = torch.from_numpy(sk.decision_function(Y.double().numpy()))
    diff = float((got["f"] - f_sk).abs().max())
    print(f"n {n}: iterations {got['n_iter']} (scikit-learn {sk.n_iter_}), max |df| {diff:.1e}")
    assert diff <= 1e-6 and torch.equal(got["f"] > 0, f_sk > 0)
    assert got["n_syncs"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("loop", LOOPS)
def test_long_runs_match_sklearn(tmp_path, loop):
    cases = [
        {"recipe": recipe, "kwargs": kw | {"loop": loop}} for recipe, kw in SLOW_CASES.values()
    ]
    results = ocsvm_triton_worker.run(cases, tmp_path)
    for (recipe, kwargs), got in zip(SLOW_CASES.values(), results, strict=True):
        sk, Y = sklearn_fit(recipe, kwargs)
        assert got["n_iter"] == sk.n_iter_ > 2 * recipe["n_fit"]
        assert torch.equal(got["support"], torch.from_numpy(sk.support_).long())
        f_sk = torch.from_numpy(sk.decision_function(Y.double().numpy()))
        assert (got["f"] - f_sk).abs().max() <= 1e-6 and torch.equal(got["f"] > 0, f_sk > 0)


def test_kernel_compiles_for_a_gpu_without_fma(triton_launches):
    """The compiled program (what CUDA runs, sm_90: the launch test's compile of the fit,
    tests/helpers/triton_launches.py): every float64 operation rounds on its own (no fused
    multiply-add), and the threads meet at barriers."""
    ptx = installed_ptx(triton_launches, "ocsvm rbf n=256 d=128")["_smo_kernel"]
    assert ".target sm_90" in ptx
    assert "fma.rn.f64" not in ptx and "div.rn.f64" in ptx and "bar.sync" in ptx


def test_gram_and_score_kernels_compile_for_a_gpu(triton_launches):
    """Both kernels build for sm_90 here without a GPU (the launch test's compiles of the fit and
    the scoring, tests/helpers/triton_launches.py), their dot products on the float64 tensor cores
    (DMMA) and exp in float64 (no float32 approximation)."""
    compiled = installed_ptx(triton_launches, "ocsvm rbf n=256 d=128")
    for ptx in (compiled["_gram_kernel"], compiled["_score_kernel"]):
        assert ".target sm_90" in ptx
        assert "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64" in ptx
        assert "ex2.approx" not in ptx


def test_both_solvers_prepare_their_launch_in_one_place(monkeypatch):
    """Both one-program solvers launch through ``smo_triton.launch`` (the device check, the
    outputs, the launch arguments) with their own kernel, scratch and size, and are one op of
    the same schema each (``smo_triton.define``). n = 300: the blocked program's BLOCK and the
    register program's NPAD are both next_power_of_2(300) = 512, on 4 warps."""
    pytest.importorskip("triton", reason="triton comes with torch's CUDA wheels; not installed")
    from negatives.ocsvm import smo_triton, smo_triton_regs

    calls = []

    def record(kernel, problem, scratch, num_warps, **size):
        calls.append((kernel, problem, scratch, num_warps, size))
        return problem[:3]

    monkeypatch.setattr(smo_triton, "launch", record)
    n, f64, i32 = 300, torch.float64, torch.int32
    problem = (torch.zeros(n, n), torch.ones(n, dtype=f64), torch.zeros(n, dtype=f64), 0,
               torch.zeros(2, dtype=f64), torch.zeros(n, dtype=f64), 10, True)  # fmt: skip
    smo_triton._solve(*problem)
    smo_triton_regs._solve(*problem)
    assert [(k, s, w, z) for k, _, s, w, z in calls] == [
        (smo_triton._smo_kernel, (((4, n), f64), ((3, n), i32)), 4, {"BLOCK": 512}),
        (smo_triton_regs._smo_regs_kernel, (((4, 512), i32), ((512,), f64)), 4, {"NPAD": 512}),
    ]
    assert all(got is want for _, p, *_ in calls for got, want in zip(p, problem, strict=True))
    schema = [
        str(op.default._schema).split("(", 1)[1] for op in (smo_triton.solve, smo_triton_regs.solve)
    ]
    assert schema[0] == schema[1]
