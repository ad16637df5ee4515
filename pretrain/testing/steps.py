"""Real training steps for the contract kit's counts: each run is built by the trainer's own
``loop.setup`` from ``digits_moco.yaml`` (sklearn's digits: no download) at tiny sizes, warmed up
past the optimizer's first step, then counted with :class:`SyncCounter` (host syncs: every step,
the first included) or :class:`OpCounter` (aten ops of one steady-state step). negmine's own
counts (``tests/helpers/count_steps.py``, ``tests/helpers/count_ops.py``) run the same functions, so
the kit and the suite measure one way.

A class the registries do not hold (a plugin's class imported by its own tests) is registered for
the run only (:func:`registered`), under a name of its own."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import torch

from negmine_core.contract.messages import registry_of
from negmine_core.contract.op_counter import OpCounter
from negmine_core.contract.sync_counter import SyncCounter

RECIPE = "digits_moco"
WARM, COUNTED = 2, 2  # steps before the counted ones (optimizer state exists), counted steps
EPOCH = 1.5  # past every warm-up (warmup_epochs=0 in the contract_kwargs)
SYNC_SIZES = [
    "model.width=8",
    "train.batch_size=16",
    "moco.queue_size=64",
    "data.num_workers=0",
    "train.progress_bar=false",
    "train.amp='off'",
]
OP_SIZES = [
    "train.batch_size=16",
    "moco.queue_size=64",
    "data.num_workers=0",
    "train.progress_bar=false",
    "train.amp='off'",
]  # (the recipe's model)


def op_sizes(batch: int) -> list[str]:
    """:data:`OP_SIZES` at ``train.batch_size=batch`` (the ops' growth with the batch)."""
    return [f"train.batch_size={batch}" if o.startswith("train.batch_size=") else o
            for o in OP_SIZES]  # fmt: skip


def registered(cls: type) -> contextlib.AbstractContextManager[str]:
    """The YAML name of ``cls``: its own where a registry holds it (a built-in, an installed
    plugin), else ``kit_<class>`` for the duration of the block (then removed again:
    :meth:`negmine_core.registry.Registry.registered`)."""
    return registry_of(cls).registered(f"kit_{cls.__name__.lower()}", cls)


@contextlib.contextmanager
def on_cpu() -> Iterator[None]:
    """The counts are a CPU's (NEGMINE_DEVICE=cpu for the block), as negmine's pins are."""
    before = os.environ.get("NEGMINE_DEVICE")
    os.environ["NEGMINE_DEVICE"] = "cpu"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("NEGMINE_DEVICE", None)
        else:
            os.environ["NEGMINE_DEVICE"] = before


def yaml_kwargs(kwargs: dict[str, Any]) -> str:
    """A kwargs dict as one YAML flow mapping for a command-line override."""
    return "{" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in kwargs.items()) + "}"


def strategy_overrides(name: str) -> list[str]:
    """What a run with strategy ``name`` needs, from its class (its contract): its
    ``contract_kwargs`` (tiny sizes that fit a 64-key queue and a batch of 16; warm-ups off), and
    a loss that can drop the queue where its negatives replace it (AdCo's bank)."""
    import negatives

    cls = negatives.strategies.get(name)
    out = [f"negatives.name={name}", f"negatives.kwargs={yaml_kwargs(cls.contract_kwargs)}"]
    if cls.replaces_queue:
        out += ["loss.contrast_queue=false"]
    return out


def loss_overrides(name: str) -> list[str]:
    """What a run with loss ``name`` needs, from its class: its ``contract_kwargs`` and, where it
    needs them, support views (FNC)."""
    from pretrain import losses

    cls = losses.registry.get(name)
    out = [f"loss.name={name}"]
    if cls.contract_kwargs:
        out.append(f"loss.kwargs={yaml_kwargs(cls.contract_kwargs)}")
    if cls.extra_views:
        out.append("data.support_views=2")
    return out


def ready(run: Any) -> None:
    """Put a run built by ``pretrain.engine.setup.setup`` where the counters start: the OC-SVM
    on its CUDA path (one Triton program) on any device, seed 0, epoch 0, training mode (the
    strategy's and the loss's setup hooks ran when it was built)."""
    run.watch = None  # the trainer's per-step checks are no part of the step counted
    svm = getattr(run.strategy, "svm", None)
    if svm is not None:
        svm.loop = "triton"
    torch.manual_seed(0)
    run.data.sampler.set_epoch(0, 0)
    run.moco.train()


def setup(recipe: str, overrides: list[str]) -> Any:
    """``pretrain.engine.setup.setup`` of ``recipe`` with ``overrides``, in a fresh output folder
    (``ConfigError`` where the config refuses them)."""
    from pretrain import config
    from pretrain.engine import setup as engine_setup

    out_dir = tempfile.mkdtemp(prefix="negmine_kit_")
    return engine_setup.setup(config.load(f"{recipe}.yaml", [f"out_dir={out_dir}", *overrides]))


def count_syncs(run: Any, warm: int = WARM, counted: int = COUNTED) -> dict[str, Any]:
    """Host syncs of ``warm + counted`` steps of a run from :func:`setup`: ``{"counts": [per
    counted step], "solver_syncs": [the OC-SVM's own n_syncs_], "where": [stack tops of the first
    counted step], "first": {"count", "where"} of step 0}``."""
    from negmine_core.step import Batch
    from pretrain.engine import loop
    from pretrain.engine.step import train_step

    ready(run)
    svm = getattr(run.strategy, "svm", None)
    counts, solver, where, first = [], [], [], {}
    for i, (x1, x2, y, _, *rows) in enumerate(run.data.train_loader):  # rows: stage-2 params
        if i == warm + counted:
            break
        loop.set_lr(run, EPOCH)
        with SyncCounter() as syncs:  # the transfer and the batched photometric stage 2 too
            # the loop's transfer (pretrain/engine/loop.py train_one_epoch): pinned, non-blocking
            x1, x2, y, *rows = (t.to(run.device, non_blocking=True) for t in (x1, x2, y, *rows))
            train_step(run, Batch.make(x1, x2, y, rows), EPOCH)
        if i == 0:  # the first step: what it builds lazily (per-device constants) shows here
            first = {"count": syncs.count, "where": [f"{s.kind}: {s.where()}" for s in syncs.syncs]}
        if i >= warm:
            counts.append(syncs.count)
            solver.append(svm.n_syncs_ if svm is not None else 0)
            where = where or [f"{s.kind}: {s.where()}" for s in syncs.syncs]
    run.log.close()
    return {"counts": counts, "solver_syncs": solver, "where": where, "first": first}


def count_ops(run: Any, path: str = "triton", sites: bool = False) -> OpCounter:
    """The aten ops of one steady-state step of a run from :func:`setup`, split BN on ``path``
    (the warm steps on the fused path: the same ops, faster than Triton's interpreter)."""
    from negmine_core.step import Batch
    from pretrain.engine import loop
    from pretrain.engine.step import train_step
    from pretrain.model.split_bn import use_path

    use_path(run.moco, "fused" if path == "triton" else path)
    ready(run)
    ops = OpCounter(sites=sites)
    for i, (x1, x2, y, _, *rows) in enumerate(run.data.train_loader):  # rows: stage-2 params
        x1, x2, y, *rows = (t.to(run.device) for t in (x1, x2, y, *rows))
        loop.set_lr(run, EPOCH)
        if i < WARM:
            train_step(run, Batch.make(x1, x2, y, rows), EPOCH)
            continue
        use_path(run.moco, path)
        with ops:
            train_step(run, Batch.make(x1, x2, y, rows), EPOCH)
        break
    run.log.close()
    return ops


def overrides_of(kind: str, name: str) -> list[str]:
    """A strategy's run (with the recipe's loss; nt_xent without the queue where the strategy
    replaces it) or a loss's (with strategy none)."""
    if kind == "loss":
        return loss_overrides(name)
    import negatives

    out = strategy_overrides(name)
    if negatives.strategies.get(name).replaces_queue:
        out.append("loss.name=nt_xent")
    return out
