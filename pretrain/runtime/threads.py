"""torch's intra-op thread count for this rank: the one rule the trainer, the OC-SVM (which runs in
the trainer's process) and the evaluators share.

Rule: ``NEGMINE_THREADS`` (environment) if set, else the explicit request (``train.threads``,
``linear_eval --threads``) if > 0, else this rank's share of the cores it may use
(:func:`pretrain.runtime.cores.per_rank`: the affinity mask divided by ``LOCAL_WORLD_SIZE``), except
that a share of at most ``SMALL_SHARE`` cores runs on one thread.

Why one thread on a small share: torch's intra-op threads wait for each other at the end of every
op; when another process holds one of the cores, every op waits for the descheduled thread. On
the 2-core CPU a digits epoch took 2.0 s quiet; beside one busy loop 7.1 s at 2 threads but 2.8 s
at 1; the OC-SVM's 65K-key scoring 3 s at 2 threads under load against ~20 ms quiet.
One thread gives up at most the share's parallel speed-up and never collapses.
"""

from __future__ import annotations

import os

import torch

from pretrain.runtime import cores

ENV = "NEGMINE_THREADS"
SMALL_SHARE = 4  # cores; at or below this a rank runs torch on one thread by default


def intra_op_threads(requested: int = 0) -> int:
    """The intra-op thread count for this rank (see the module docstring).

    Raises:
        ValueError: a negative request, or a ``NEGMINE_THREADS`` that is not a positive integer.
    """
    env = os.environ.get(ENV, "").strip()
    if env:
        try:
            value = int(env)
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"{ENV} must be a positive integer, got {env!r}")
        return value
    if requested < 0:
        raise ValueError(f"thread count must be >= 0 (0 = automatic), got {requested}")
    if requested > 0:
        return requested
    share = cores.per_rank()
    return 1 if share <= SMALL_SHARE else share


def configure(requested: int = 0, device: torch.device | str = "cpu") -> int:
    """Set torch's intra-op threads for a run on ``device`` and return the count in use.

    On a GPU run the CPU only feeds the device: the count is still this rank's share (ranks on
    one node must not each take every core), but the small-share rule does not apply."""
    n = intra_op_threads(requested)
    if torch.device(device).type != "cpu" and not requested and not os.environ.get(ENV):
        n = cores.per_rank()
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n
