"""World size, rank, gather and shuffle-BN helpers that degrade to the identity in one process."""

from __future__ import annotations

import os

import torch
import torch.distributed as td


def is_on() -> bool:
    return td.is_available() and td.is_initialized()


def world_size() -> int:
    return td.get_world_size() if is_on() else 1


def rank() -> int:
    return td.get_rank() if is_on() else 0


def is_main() -> bool:
    return rank() == 0


def init_from_env() -> torch.device:
    """Join the process group of torchrun's variables, if any; return this rank's device."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not is_on():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        td.init_process_group(backend)
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def barrier() -> None:
    if is_on():
        td.barrier()


@torch.no_grad()
def gather(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` from every rank along dim 0 (no gradient); identity in one process."""
    if not is_on():
        return x
    out = [torch.empty_like(x) for _ in range(world_size())]
    td.all_gather(out, x.contiguous())
    return torch.cat(out)


@torch.no_grad()
def shuffle_batch(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Shuffle the global batch (MoCo ``_batch_shuffle_ddp``; single-device variant of the colab).

    Returns this rank's part of the shuffled batch and the index that undoes it. Rank 0 draws the
    permutation and broadcasts it, so all ranks agree.
    """
    full = gather(x)
    perm = torch.randperm(full.shape[0], device=x.device)
    if is_on():
        td.broadcast(perm, src=0)
    unshuffle = torch.argsort(perm)
    n = x.shape[0]
    mine = perm.view(world_size(), n)[rank()]
    return full[mine], unshuffle.view(world_size(), n)[rank()]


@torch.no_grad()
def unshuffle_batch(x: torch.Tensor, unshuffle: torch.Tensor) -> torch.Tensor:
    """Undo :func:`shuffle_batch` on this rank's outputs."""
    return gather(x)[unshuffle]
