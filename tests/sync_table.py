"""The number of would-be CUDA host syncs per steady-state training step, as measured by
:mod:`sync_counter` on a CPU (``tests/test_step_syncs.py`` asserts it; docs/step_counts.md shows
it, written by ``scripts/gen_step_counts.py``). A pair's count is what its loss and its strategy
declare (their ``syncs_per_step`` class attributes, the contract of
``negatives.base.NegativeStrategy`` and ``pretrain.losses.Loss``) plus the kappa head's and split
BN's Triton path's below (0 each). Every step counts it, the first one included.

A strategy or loss of one's own declares its count on its class (default 0); the sync test
measures it like a built-in's and names the class and the attribute when they differ, with the
contract kit's check (``negatives.testing.syncs``), which a plugin's own tests run too.
"""

from __future__ import annotations

from negatives.testing import syncs

KAPPA_SYNCS = (0, "-")
SPLIT_BN_SYNCS = (  # model.split_bn=triton (2 splits), any loss: counted with infonce
    0,
    "the four Triton kernels per layer read (eps, momentum) from a float64 buffer built at "
    "construction and moved by .to() (pretrain/model/split_bn.py triton_params)",
)

# MiOC counts its CUDA path (tests/count_steps.py forces it on a CPU): the OC-SVM fit is one
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


def declared(loss: str, strategy: str, kappa: bool = False, split_bn: bool = False) -> int:
    """The count ``loss`` x ``strategy`` declare (their ``syncs_per_step``), + the model's."""
    extra = (KAPPA_SYNCS[0] if kappa else 0) + (SPLIT_BN_SYNCS[0] if split_bn else 0)
    return syncs.declared(loss, strategy, extra)


who = syncs.who  # where each side's count is declared, for a failure message


def check(pair: str, got: dict) -> None:
    """The contract kit's check (``negatives.testing.syncs.check_pair``: a ContractError, an
    AssertionError, naming the classes and ``syncs_per_step``) of a pair's measured count
    (``got``: a result of tests/count_steps.py) against what it declares."""
    loss, strategy = pair.split("/")
    kappa, split_bn = loss.endswith("+kappa"), loss.endswith("+split_bn")
    loss = loss.removesuffix("+kappa").removesuffix("+split_bn")
    syncs.check_pair(pair, got, declared(loss, strategy, kappa, split_bn), who(loss, strategy))
