"""Count the would-be CUDA host syncs of steady-state training steps, for every valid pair of
registered loss x registered negative strategy (and a kappa-head and a split-BN variant).

    python tests/helpers/count_steps.py OUT                       # one process: OUT.rank0
    torchrun --nproc_per_node 2 tests/helpers/count_steps.py OUT  # 2 gloo ranks: OUT.rank{0,1}

Each pair is built by the trainer's own ``loop.setup`` from ``digits_moco.yaml`` at tiny sizes
(invalid pairs are the ones the config refuses: ``ConfigError``), runs ``WARM`` steps of
``loop.train_step`` past every warm-up (``epoch`` > every ``warmup_epochs``), then counts
``COUNTED`` more steps with the contract kit's :class:`SyncCounter`
(``pretrain.testing.steps.count_syncs``, the kit's own count); the first step is counted too
(per-device constants are built at setup or ``.to()``, never lazily in a step). No step here is a
logging step: ``train_step`` never logs (``loop.log_step`` is the loop's separate,
counted-as-intended sync). Writes ``{pair: {"counts": [per counted step], "solver_syncs": [the
OC-SVM's own n_syncs_ per counted step, 0 without one], "where": [stack tops of the first counted
step], "first": {"count", "where"} of step 0}}`` and ``{"invalid": [pairs refused by the
config]}``. The OC-SVM runs its CUDA path (the whole fit in one Triton program,
``loop="triton"``) on any device, and so does split BN in the ``+split_bn`` variant
(``model.split_bn=triton``, 2 splits; with MiOC): on a CPU in Triton's
interpreter, chosen here before triton is imported. Not a test file.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

if not torch.cuda.is_available():  # the OC-SVM's Triton program runs in Triton's interpreter on
    os.environ.setdefault("TRITON_INTERPRET", "1")  # a CPU: chosen before triton is imported
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

import negatives  # noqa: E402
from pretrain import losses  # noqa: E402
from pretrain.config import ConfigError  # noqa: E402
from pretrain.runtime import dist  # noqa: E402
from pretrain.testing import steps  # noqa: E402  (the kit's real steps: one way to count)
from pretrain.testing.steps import loss_overrides, ready, strategy_overrides, yaml_kwargs  # noqa: E402, F401

# step 0 is counted on its own ("first"); from step 1 on the optimizer's state exists, so the
# counted steps are 1 and 2 (the kit's default warms 2 steps; one is enough here, ~100 pairs)
WARM, COUNTED = 1, steps.COUNTED
EPOCH = steps.EPOCH  # past every warm-up below (warmup_epochs=0 where a strategy has one)
TINY = steps.SYNC_SIZES


VARIANTS = {  # split BN on its CUDA path (Triton kernels; Triton's interpreter on a CPU)
    "": [],
    "+kappa": ["kappa.hidden=16"],
    "+split_bn": ["model.bn_splits=2", "model.split_bn=triton"],
}
KAPPA_WITH = ("supcon",)  # the kappa head is loss-agnostic: counted with one loss
SPLIT_BN_WITH = ("infonce",)  # so is split BN (the recipes' loss), counted with MiOC: both Triton
# paths in one step (interpreted, ~10 s a pair). infonce/mioc is counted without split BN, and both
# counts are exact, so split BN's own share is their difference: a split_bn/none pair adds nothing
SPLIT_BN_STRATEGIES = ("mioc",)


def pairs() -> list[tuple[str, str, str]]:
    out = []
    for loss in losses.list_losses():
        for name in negatives.list_strategies():
            out.append((loss, name, ""))
            if loss in KAPPA_WITH:
                out.append((loss, name, "+kappa"))
            if loss in SPLIT_BN_WITH and name in SPLIT_BN_STRATEGIES:
                out.append((loss, name, "+split_bn"))
    return out


def key(loss: str, strategy: str, variant: str = "") -> str:
    return f"{loss}{variant}/{strategy}"


def count_pair(out_dir: Path, loss: str, strategy: str, variant: str) -> dict[str, Any] | None:
    """The kit's sync count (``pretrain.testing.steps.count_syncs``) of one pair, or None where
    the config refuses it."""
    overrides = [f"out_dir={out_dir}", *TINY, *loss_overrides(loss)]
    overrides += [*strategy_overrides(strategy), *VARIANTS[variant]]
    try:
        run = steps.setup("digits_moco", overrides)
    except ConfigError:
        return None
    return steps.count_syncs(run, WARM, COUNTED)


def main(out: Path) -> None:
    result: dict[str, Any] = {"invalid": [], "world_size": None}
    for loss, strategy, variant in pairs():
        run_dir = out.parent / f"run_{loss}{variant}_{strategy}"
        counted = count_pair(run_dir, loss, strategy, variant)
        if counted is None:
            result["invalid"].append(key(loss, strategy, variant))
        else:
            result[key(loss, strategy, variant)] = counted
    result["world_size"] = dist.world_size()
    Path(f"{out}.rank{dist.rank()}").write_text(json.dumps(result, indent=1))
    dist.barrier()
    if dist.is_on():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
