"""The documented number of would-be CUDA host syncs per steady-state training step, as measured
by :mod:`sync_counter` on a CPU (``tests/test_step_syncs.py`` asserts it; the sync table of
docs/step_counts.md copies it). A pair's count is its loss's plus its strategy's (the kappa head
and split BN's Triton path add 0). Every step counts it, the first one included.

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
SPLIT_BN_SYNCS = (  # model.split_bn=triton (2 splits), any loss: counted with infonce
    0,
    "the four Triton kernels per layer read (eps, momentum) from a float64 buffer built at "
    "construction and moved by .to() (pretrain/model/split_bn.py triton_params)",
)

# MiOC counts its CUDA path (tests/count_steps.py forces it on a CPU): the OC-SVM fit is one
# Triton program (negatives/ocsvm/smo_triton.py) and the scoring, the inlier mask and the S_o draw
# are fixed-shape tensor ops, so nothing is read on the host. A count may still use n, the solver's
# own sync count (svm.n_syncs_, 0 on this path). MIOC_CPU_PATH: the CPU default (the host SMO loop,
# loop="host"), which reads the batch on the host by design and never runs on CUDA.
STRATEGY_SYNCS: dict[str, tuple[str, str]] = {
    "none": ("0", "-"),
    "mochi": ("0", "-"),
    "modified_mochi": ("0", "-"),
    "outliers": ("0", "-"),
    "adco": ("0", "-"),
    "mioc": ("0", "the OC-SVM fit is one Triton program; its result stays on the device"),
}
MIOC_CPU_PATH = [  # where, host reads per step on a CPU, file
    ("fit: finite check of the batch", 1, "negatives/ocsvm/svm.py fit"),
    ("fit: the batch to numpy for the host SMO loop", 1, "ocsvm.py _fit_torch"),
    ("fit: the solution (G, alpha, perm)", 3, "ocsvm.py solution_to_host"),
    ("scoring: exp factoring bound", 2, "ocsvm.py decision_function"),
]


def documented(
    loss: str, strategy: str, solver_syncs: int, kappa: bool = False, split_bn: bool = False
) -> int:
    """The documented CPU-measured count of ``loss`` x ``strategy`` (KeyError if missing)."""
    expr = STRATEGY_SYNCS[strategy][0]
    base = LOSS_SYNCS[loss][0] + (KAPPA_SYNCS[0] if kappa else 0)
    base += SPLIT_BN_SYNCS[0] if split_bn else 0
    return base + int(eval(expr, {}, {"n": solver_syncs}))  # noqa: S307 (our own table)
