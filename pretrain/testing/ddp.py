"""The 2-rank equivalence of a strategy that draws across ranks (opt-in: ``ddp_check = True``):
two gloo processes on the CPU, each calling the hook as the trainer does under DDP (its own rows
of the batch, or the gathered batch where ``needs_global_batch``; the step's rank and world size),
must see what one process sees with the global batch: the same shared negatives, and each rank's
rows of the per-query ones."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from typing import Any

import torch

from negmine_core.contract.messages import fail

N, D, K = 8, 16, 32  # per rank: the kit's sizes
WORLD = 2


def inputs() -> tuple[torch.Tensor, ...]:
    """The global batch (WORLD * N rows) and the queue, the same in every process."""
    from pretrain.testing.behaviour import unit

    g = torch.Generator().manual_seed(11)
    q, k, queue = unit(WORLD * N, D, g=g), unit(WORLD * N, D, g=g), unit(K, D, g=g)
    return q, k, queue, torch.randint(-1, 5, (K,), generator=g)


def negatives(cls: type, rank: int, world: int) -> Any:
    """The hook's record at ``rank`` of ``world`` (1: one process with the global batch)."""
    from negmine_core.step import Embeddings, Step, StepContext
    from pretrain.testing.behaviour import EPOCH, build_strategy

    torch.manual_seed(0)  # every rank shares the seed, as the trainer's do
    strategy = build_strategy(cls)
    q, k, queue, labels = inputs()
    rows = slice(rank * N, (rank + 1) * N) if world > 1 else slice(None)
    y = torch.full((q.shape[0],), -1, dtype=torch.long)
    s = Step(  # as the trainer makes it: this rank's rows, every rank's where it asks for them
        emb=Embeddings(q=q[rows], k=k[rows]),
        k_all=k,
        labels=y[rows],
        labels_all=y,
        queue=queue,
        queue_labels=labels,
        ctx=StepContext(epoch=EPOCH, rank=rank, world_size=world),
        q_all=q if cls.needs_global_batch else None,
    )
    return strategy.negatives(s)


def _rank(rank: int, cls: type, port: int, out: str) -> None:
    import torch.distributed as td

    td.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    try:
        extra = negatives(cls, rank, WORLD)
        torch.save({"shared": extra.shared, "per_query": extra.per_query}, f"{out}.{rank}")
    finally:
        td.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_ranks(cls: type) -> None:
    """ContractError naming ``cls``, ``negatives()`` and ``ddp_check`` when 2 gloo ranks differ
    from one process with the global batch."""
    import torch.multiprocessing as mp

    one = negatives(cls, 0, 1)
    with tempfile.TemporaryDirectory(prefix="negmine_ddp_") as tmp:
        out = str(Path(tmp) / "extra")
        before = os.environ.get("NEGMINE_DEVICE")
        os.environ["NEGMINE_DEVICE"] = "cpu"
        try:
            mp.spawn(_rank, args=(cls, free_port(), out), nprocs=WORLD, join=True)
        finally:
            if before is None:
                os.environ.pop("NEGMINE_DEVICE", None)
            else:
                os.environ["NEGMINE_DEVICE"] = before
        got = [torch.load(f"{out}.{r}", weights_only=True) for r in range(WORLD)]
    fix = (
        "under DDP draw for the global batch (s.world_size x N rows) and keep this rank's "
        "rows (s.rank), or declare needs_global_batch; or leave ddp_check = False"
    )
    for r, extra in enumerate(got):
        want = one.per_query
        if want is not None and not cls.needs_global_batch:
            want = want[r * N : (r + 1) * N]
        for field, ref in (("shared", one.shared), ("per_query", want)):
            t = extra[field]
            if (t is None) != (ref is None) or (t is not None and not torch.equal(t, ref)):
                what = f"rank {r} of 2 (gloo) returns other {field} than one process with the "
                raise fail(cls, "negatives()", what + "global batch (ddp_check = True)", fix)
