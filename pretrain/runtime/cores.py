"""How many CPU cores this process may use: the one place that answers it (loader workers,
intra-op threads). Counts the affinity mask (what SLURM's cgroup/cpuset grants), not the node,
divided among the ranks that share this node."""

from __future__ import annotations

import os


def available() -> int:
    """Cores in this process's affinity mask (``os.cpu_count()`` where there is no mask)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def per_rank() -> int:
    """This rank's share of the node's cores (``LOCAL_WORLD_SIZE`` ranks per node, as torchrun
    and our SLURM launcher set it); at least 1."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    return max(1, available() // max(local, 1))


def loader_workers(requested: int) -> int:
    """``data.num_workers`` capped so workers plus the training process fit this rank's cores:
    at most ``per_rank() - 1`` (0 = load in the training process on a one-core share). A
    negative request (the default, -1) takes that maximum: a 16-core node with one GPU runs 15
    workers, with 8 GPUs each rank runs 1."""
    most = per_rank() - 1
    return max(0, most if requested < 0 else min(requested, most))
