"""The documented number of would-be CUDA host syncs per steady-state training step, as measured
by :mod:`sync_counter` on a CPU (``tests/test_step_syncs.py`` asserts it; docs/step_counts.md's
sync table copies it). A pair's count is its loss's plus its strategy's (the kappa head adds 0).

A new loss or strategy has no entry, so the test fails until its count is written here
with its reason.
"""

from __future__ import annotations

LOSS_SYNCS: dict[str, tuple[int, str]] = {
    "infonce": (0, "-"),
    "nt_xent": (0, "-"),
    "supcon": (0, "-"),
    "sincere": (0, "-"),
    "firm": (0, "-"),
    "debiased": (0, "-"),
    "hard": (0, "-"),
    "decoupled": (0, "-"),
    "ring": (0, "-"),
    "imix": (0, "-"),
    "fnc": (0, "-"),
    "cider": (
        1,
        "the per-class prototype EMA loops over the largest class count in the batch: one "
        "copy of (labels valid?, rounds) to the host (pretrain/losses/cider.py sequential_ema)",
    ),
}
KAPPA_SYNCS = (0, "-")

# MiOC: a formula of the OC-SVM solver's own sync count n (svm.n_syncs_ after the step's fit:
# one check per chunk of solver iterations, negatives/ocsvm_smo.py DeviceOps.host/nonzero, + 1
# copy of the solution). Measured on a CPU: n + 11; on CUDA: n + 9 (see MIOC_DETAIL).
STRATEGY_SYNCS: dict[str, tuple[str, str]] = {
    "none": ("0", "-"),
    "mochi": ("0", "-"),
    "modified_mochi": ("0", "-"),
    "outliers": ("0", "-"),
    "adco": ("0", "-"),
    "mioc": ("n + 11", "the OC-SVM fit: see below"),
}
MIOC_DETAIL = [
    ("fit: finite check of the batch", 1, 1, "negatives/ocsvm.py fit"),
    ("fit: squared norms of the kernel to the host", 1, 1, "negatives/ocsvm_smo.py Kernel"),
    ("solver: stop/shrink checks, once per chunk", "n - 1", "n - 1", "ocsvm_smo.py DeviceOps"),
    ("solver: the initial alpha and kernel diagonal to the device", 2, 2, "ocsvm_smo.py init"),
    ("solver: the solution (G, alpha, perm) in one copy", 1, 1, "ocsvm.py solution_to_host"),
    ("fit: support, dual_coef, rho, n_support back on the device", 5, 5, "ocsvm.py fit"),
    ("scoring: exp factoring bound (CPU only)", 2, 0, "ocsvm.py decision_function"),
]


def documented(loss: str, strategy: str, solver_syncs: int, kappa: bool = False) -> int:
    """The documented CPU-measured count of ``loss`` x ``strategy`` (KeyError if missing)."""
    expr = STRATEGY_SYNCS[strategy][0]
    base = LOSS_SYNCS[loss][0] + (KAPPA_SYNCS[0] if kappa else 0)
    return base + int(eval(expr, {}, {"n": solver_syncs}))  # noqa: S307 (our own table)
