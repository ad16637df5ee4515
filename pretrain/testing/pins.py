"""negmine's own regression pins of its built-ins, per steady-state training step, counted by the
contract kit's real steps (:mod:`pretrain.testing.steps`) on a CPU: the aten ops
(:mod:`negmine_core.contract.op_counter`) per recipe x negative strategy on the device path
(split BN's Triton kernels, as on CUDA), per loss (with strategy none, on ``digits_moco``) and
per split BN path; and the host syncs (:mod:`negmine_core.contract.sync_counter`) of the model's
parts that no strategy or loss declares. negmine's suite asserts them exactly
(``tests/pretrain/engine/test_step_ops.py``, ``tests/pretrain/engine/test_step_syncs.py``) and
``scripts/gen_step_counts.py`` writes them to docs/step_counts.md; they live in the package so
that the script needs nothing of ``tests/``.

A strategy or loss without a pin (one's own, in the tree or a plugin) is held to the relative
bound of the contract kit instead (:func:`pretrain.testing.ops.check_bound`): at most its
``ops_budget`` over plain MoCo's step, ``STRATEGY_TARGET`` (+15 %) where it declares none. MiOC
is counted on its CUDA path (the OC-SVM's Gram matrix, fit and scoring as three Triton launches,
run by Triton's interpreter on a CPU); its count does not depend on the solver's iterations, so
every count is exact."""

from __future__ import annotations

from pretrain.testing.ops import DEFAULT_BUDGET

DEVICE_OPS: dict[str, dict[str, int]] = {  # cifar10_moco none: 618 before stage 2's colour
    # matrices, 459 before the key encoder's one cast and split BN's fused ReLUs and shortcut sums
    "cifar10_moco": {
        "none": 371,
        "mochi": 403,
        "modified_mochi": 408,
        "outliers": 385,
        "adco": 402,
        "mioc": 398,
    },
    "digits_moco": {
        "none": 231,
        "mochi": 263,
        "modified_mochi": 268,
        "outliers": 241,
        "adco": 262,
        "mioc": 258,
    },
}
PATH_OPS = {  # plain MoCo with split BN on each path: (ops, of them batch_norm)
    "triton": {"cifar10_moco": (371, 0), "digits_moco": (231, 36)},  # = DEVICE_OPS' none
    "fused": {"cifar10_moco": (1058, 0), "digits_moco": (231, 36)},
    "per_split": {"cifar10_moco": (1378, 480), "digits_moco": (231, 36)},
    # one launch per layer each way (opt-in), without the fused ReLUs and shortcut sums
    "triton_onepass": {"cifar10_moco": (378, 0), "digits_moco": (231, 36)},
}
BEFORE = {"cifar10_moco": 1802, "digits_moco": 426}  # plain MoCo at fb6efcd (per-split BN on
# every device, SGD looping over parameters): the same counter and harness
TARGETS = {"cifar10_moco": 700, "digits_moco": 350}  # plain MoCo, eager
STRATEGY_TARGET = DEFAULT_BUDGET  # what an unpinned class may add (without an ops_budget)
LOSS_OPS = {  # digits_moco, strategy none, each loss's contract (fnc: data.support_views=2)
    "cider": 525,
    "debiased": 277,
    "decoupled": 236,
    "firm": 251,
    "fnc": 339,
    "hard": 289,
    "imix": 261,
    "infonce": 231,  # = DEVICE_OPS' none
    "nt_xent": 239,
    "ring": 241,
    "sincere": 285,
    "supcon": 251,
}

KAPPA_SYNCS = (0, "-")
SPLIT_BN_SYNCS = (  # model.split_bn=triton (2 splits), any loss: counted with infonce
    0,
    "the four Triton kernels per layer read (eps, momentum) from a float64 buffer built at "
    "construction and moved by .to() (pretrain/model/split_bn.py triton_params)",
)

# MiOC counts its CUDA path (tests/helpers/count_steps.py forces it on a CPU): the OC-SVM fit is one
# Triton program (negatives/ocsvm/smo_triton.py) and the scoring, the inlier mask and the S_o draw
# are fixed-shape tensor ops, so nothing is read on the host (the solver's own count,
# svm.n_syncs_, is 0 on this path and asserted apart). MIOC_CPU_PATH: the CPU default (the host
# SMO loop, loop="host"), which reads the batch on the host by design and never runs on CUDA.
MIOC_CPU_PATH = [  # where, host reads per step on a CPU, file
    ("fit: finite check of the batch", 1, "negatives/ocsvm/svm.py fit"),
    ("fit: the batch to numpy for the host SMO loop", 1, "ocsvm.py _fit_torch"),
    ("fit: the solution (G, alpha, perm)", 3, "ocsvm.py solution_to_host"),
    ("scoring: exp factoring bound", 2, "ocsvm.py decision_function"),
]
