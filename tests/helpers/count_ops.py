"""Count the aten ops of one steady-state training step (a proxy for CUDA kernel launches), per
recipe x negative strategy, on the device path of split BatchNorm and on the CPU's.

    TRITON_INTERPRET=1 python tests/helpers/count_ops.py  # docs/step_counts.md's markdown tables
    TRITON_INTERPRET=1 python tests/helpers/count_ops.py --one cifar10_moco triton none mioc

Each setting is built by the trainer's own ``loop.setup`` from the recipe (``cifar10_moco.yaml``
on a tiny CIFAR-10 written in its true format, ``digits_moco.yaml``) at tiny sizes that do not
change what is dispatched (batch 16, queue 64; the model, its BN splits, the augmentation and the
precision are the recipe's, amp as on CUDA: bf16 for CIFAR-10, off for digits), runs ``WARM`` steps
of ``loop.train_step`` (the optimizer's momentum buffers exist after the first), then counts one
step with the contract kit's ``pretrain.testing.steps.count_ops`` (an OpCounter): augmentation
(stage 2), both encoders, strategy, loss, backward, optimizer, momentum update, enqueue. ``path``
forces the split-BN path (triton: CUDA's, run by Triton's interpreter here; fused: the aten ops of
the compiled path; per_split: the CPU's). Not a test file:
``tests/pretrain/engine/test_step_ops.py`` imports it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

# The interpreter is Triton's mode only if TRITON_INTERPRET=1 came before triton's first import:
# true of a process started with it (the command line above), not of a test session (anything may
# have imported triton first, and tests/helpers/count_steps.py sets the variable later), which
# therefore counts Triton's kernels in a fresh process.
STARTED_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1" and "triton" not in sys.modules
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

import negatives  # noqa: E402
from negmine_core.contract.op_counter import OpCounter  # noqa: E402
from pretrain import config  # noqa: E402
from pretrain.testing import steps  # noqa: E402  (the kit's real steps: one way to count)
from pretrain.testing.fakedata import write_cifar10  # noqa: E402
from pretrain.testing.steps import loss_overrides, strategy_overrides  # noqa: E402

WARM = steps.WARM
EPOCH = steps.EPOCH  # past every warm-up (warmup_epochs=0 in the strategies' contract_kwargs)
TINY = steps.OP_SIZES
RECIPES = {"cifar10_moco": ["train.amp=bf16"], "digits_moco": ["train.amp='off'"]}
PATH_NAMES = {"triton": "device (Triton)", "fused": "aten fused", "per_split": "CPU (per split)"}


@cache
def cifar_root() -> str:
    root = tempfile.mkdtemp(prefix="negmine_ops_")
    write_cifar10(Path(root), per_batch=16, test=16)
    return root


LOSS_RECIPE = "digits_moco"  # where each loss is counted (with strategy none)


def overrides(recipe: str, strategy: str) -> list[str]:
    """``strategy``: a strategy's name (with the recipe's loss), or ``loss:NAME`` (a loss with
    strategy none); each with what its class's contract asks for (tests/helpers/count_steps.py)."""
    out = [*TINY, *RECIPES[recipe]]
    if strategy.startswith("loss:"):
        out += loss_overrides(strategy.removeprefix("loss:"))
    else:
        out += strategy_overrides(strategy)
        if negatives.strategies.get(strategy).replaces_queue:  # adco: its bank, not the queue
            out.append("loss.name=nt_xent")
    if recipe.startswith("cifar10"):
        out.append(f"data.root={cifar_root()}")
    return out


def count(recipe: str, strategy: str = "none", path: str = "triton") -> OpCounter:
    """The ops of one steady-state step of ``recipe`` with ``strategy`` (or ``loss:NAME``, see
    :func:`overrides`), split BN on ``path``
    (triton: needs TRITON_INTERPRET=1 on a CPU, see :func:`count_in_subprocess`)."""
    run = steps.setup(recipe, overrides(recipe, strategy))
    return steps.count_ops(run, path)  # the kit's count of one steady-state step


def needs_interpreter(recipe: str, strategy: str, path: str = "triton") -> bool:
    """Whether the count runs a Triton kernel: split BN's (recipes with BN splits) or MiOC's."""
    splits = config.load(f"{recipe}.yaml").model.bn_splits  # > 1: split BN
    return strategy == "mioc" or (path in ("triton", "triton_onepass") and splits > 1)


def counts(
    recipe: str, strategies: list[str], path: str = "triton", fresh: bool = True
) -> dict[str, int]:
    """:func:`count` of each strategy; where a Triton kernel runs (:func:`needs_interpreter`), in
    one fresh process with TRITON_INTERPRET=1 unless ``fresh`` is False (this process started
    with the interpreter: :data:`STARTED_INTERPRETED`)."""
    out = {}
    here = [s for s in strategies if not (fresh and needs_interpreter(recipe, s, path))]
    for strategy in here:
        out[strategy] = count(recipe, strategy, path).count
    rest = [s for s in strategies if s not in here]
    if rest:
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        cmd = [sys.executable, __file__, "--one", recipe, path, *rest]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
        if run.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stderr[-3000:]}")
        out |= dict(zip(rest, map(int, run.stdout.split()[-len(rest) :]), strict=True))
    return out


def table() -> list[str]:
    """The markdown rows of docs/step_counts.md's op tables (device path per strategy, then plain
    MoCo on each split-BN path). Run with TRITON_INTERPRET=1 (the Triton kernels)."""
    rows = ["| recipe | strategy | ops per step | added vs `none` |", "|---|---|---|---|"]
    for recipe in RECIPES:
        got = counts(recipe, negatives.list_strategies(), fresh=not STARTED_INTERPRETED)
        for strategy, n in got.items():
            rows.append(
                f"| {recipe} | {strategy} | {n} | {100 * (n - got['none']) / got['none']:+.1f} % |"
            )
    rows += [
        "",
        "| recipe | split BN path | ops per step | of them batch_norm |",
        "|---|---|---|---|",
    ]
    for recipe in RECIPES:
        for path, name in PATH_NAMES.items():
            ops = count(recipe, path=path)
            rows.append(f"| {recipe} | {name} | {ops.count} | {ops.matching('batch_norm')} |")
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:  # count_ops.py --one RECIPE PATH STRATEGY...: the counts
        for strategy in sys.argv[4:]:
            print(count(sys.argv[2], strategy, sys.argv[3]).count)
    else:
        print("\n".join(table()))
