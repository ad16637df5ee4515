"""Count the would-be CUDA host syncs of steady-state training steps, for every valid pair of
registered loss x registered negative strategy (and a kappa-head and a split-BN variant).

    python tests/count_steps.py OUT                           # one process: OUT.rank0
    torchrun --nproc_per_node 2 tests/count_steps.py OUT      # two gloo ranks: OUT.rank{0,1}

Each pair is built by the trainer's own ``loop.setup`` from ``digits_moco.yaml`` at tiny sizes
(invalid pairs are the ones the config refuses: ``ConfigError``), runs ``WARM`` steps of
``loop.train_step`` past every warm-up (``epoch`` > every ``warmup_epochs``), then counts
``COUNTED`` more steps with :class:`sync_counter.SyncCounter`; the first step is counted too
(per-device constants are built at setup or ``.to()``, never lazily in a step). No step here is a
logging step: ``train_step`` never logs (``loop.log_step`` is the loop's separate,
counted-as-intended sync). Writes ``{pair: {"counts": [per counted step], "solver_syncs": [the
OC-SVM's own n_syncs_ per counted step, 0 without one], "where": [stack tops of the first counted
step], "first": {"count", "where"} of step 0}}`` and ``{"invalid": [pairs refused by the
config]}``. The OC-SVM runs its CUDA path (the whole fit in one Triton program,
``loop="triton"``) on any device, and so does split BN in the ``+split_bn`` variant
(``model.split_bn=triton``, 2 splits; with plain MoCo and MiOC): on a CPU in Triton's
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
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sync_counter import SyncCounter  # noqa: E402

import negatives  # noqa: E402
from negmine_core.step import Batch  # noqa: E402
from pretrain import config, losses  # noqa: E402
from pretrain.config import ConfigError  # noqa: E402
from pretrain.engine import loop  # noqa: E402
from pretrain.runtime import dist  # noqa: E402

WARM, COUNTED = 2, 2
EPOCH = 1.5  # past every warm-up below (warmup_epochs=0 where a strategy has one)
TINY = [
    "model.width=8",
    "train.batch_size=16",
    "moco.queue_size=64",
    "data.num_workers=0",
    "train.progress_bar=false",
    "train.amp='off'",
]


def yaml_kwargs(kwargs: dict[str, Any]) -> str:
    """A kwargs dict as one YAML flow mapping for a command-line override."""
    return "{" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in kwargs.items()) + "}"


def strategy_overrides(name: str) -> list[str]:
    """What a run with strategy ``name`` needs, from its class (its contract): its
    ``contract_kwargs`` (tiny sizes that fit a 64-key queue and a batch of 16; warm-ups off), and
    a loss that can drop the queue where its negatives replace it (AdCo's bank)."""
    cls = negatives.strategies.get(name)
    out = [f"negatives.name={name}", f"negatives.kwargs={yaml_kwargs(cls.contract_kwargs)}"]
    if cls.replaces_queue:
        out += ["loss.contrast_queue=false"]
    return out


def loss_overrides(name: str) -> list[str]:
    """What a run with loss ``name`` needs, from its class: its ``contract_kwargs`` and, where it
    needs them, support views (FNC)."""
    cls = losses.registry.get(name)
    out = [f"loss.name={name}"]
    if cls.contract_kwargs:
        out.append(f"loss.kwargs={yaml_kwargs(cls.contract_kwargs)}")
    if cls.extra_views:
        out.append("data.support_views=2")
    return out


VARIANTS = {  # split BN on its CUDA path (Triton kernels; Triton's interpreter on a CPU)
    "": [],
    "+kappa": ["kappa.hidden=16"],
    "+split_bn": ["model.bn_splits=2", "model.split_bn=triton"],
}
KAPPA_WITH = ("supcon",)  # the kappa head is loss-agnostic: counted with one loss
SPLIT_BN_WITH = ("infonce",)  # so is split BN (the recipes' loss), counted with plain MoCo and
SPLIT_BN_STRATEGIES = ("none", "mioc")  # MiOC (both Triton paths in one step): interpreted, slow


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


def ready(run: Any) -> None:
    """Put a run built by ``loop.setup`` where the counters start: the OC-SVM on its CUDA path
    (one Triton program) on any device, seed 0, the loss initialised, epoch 0, training mode."""
    svm = getattr(run.strategy, "svm", None)
    if svm is not None:
        svm.loop = "triton"
    torch.manual_seed(0)
    loop.init_loss(run)
    run.data.sampler.set_epoch(0, 0)
    run.moco.train()


def count_pair(out_dir: Path, loss: str, strategy: str, variant: str) -> dict[str, Any] | None:
    overrides = [f"out_dir={out_dir}", *TINY, *loss_overrides(loss)]
    overrides += [*strategy_overrides(strategy), *VARIANTS[variant]]
    try:
        cfg = config.load("digits_moco.yaml", overrides)
        run = loop.setup(cfg)
    except ConfigError:
        return None
    ready(run)
    svm = getattr(run.strategy, "svm", None)
    counts, solver, where, first = [], [], [], {}
    for i, (x1, x2, y, _, *rows) in enumerate(run.data.train_loader):  # rows: stage-2 params
        if i == WARM + COUNTED:
            break
        loop.set_lr(run, EPOCH)
        with SyncCounter() as syncs:  # the transfer and the batched photometric stage 2 too
            # the loop's transfer (pretrain/engine/loop.py train_one_epoch): pinned, non-blocking
            x1, x2, y, *rows = (t.to(run.device, non_blocking=True) for t in (x1, x2, y, *rows))
            loop.train_step(run, Batch.make(x1, x2, y, rows), EPOCH)
        if i == 0:  # the first step: what it builds lazily (per-device constants) shows here
            first = {"count": syncs.count, "where": [f"{s.kind}: {s.where()}" for s in syncs.syncs]}
        if i >= WARM:
            counts.append(syncs.count)
            solver.append(svm.n_syncs_ if svm is not None else 0)
            where = where or [f"{s.kind}: {s.where()}" for s in syncs.syncs]
    run.log.close()
    return {"counts": counts, "solver_syncs": solver, "where": where, "first": first}


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
