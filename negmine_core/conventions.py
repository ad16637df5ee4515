"""The conventions the queue, the strategies, the losses and the evaluation share, stated once.

Labels:
    labels >= 0      real images of a known class (in-distribution)
    NO_LABEL (-1)    unknown: an unlabelled image, or a queue slot not yet filled
    <= -2            synthetic outliers made by a data-level strategy: OUTLIER_LABEL (-2) for one
                     shared outlier class, or rotation_label(r) = -1 - r for r quarter turns
                     (90 deg -> -2, 180 deg -> -3, 270 deg -> -4) when each rotation is a class

Ranks: :func:`rank_and_world`, (0, 1) without torch.distributed.
"""

from __future__ import annotations

import torch.distributed as td

NO_LABEL = -1
OUTLIER_LABEL = -2


def rotation_label(quarter_turns: int) -> int:
    """Label of an outlier rotated by ``quarter_turns`` * 90 degrees (1, 2 or 3)."""
    if quarter_turns not in (1, 2, 3):
        raise ValueError(f"quarter_turns must be 1, 2 or 3, got {quarter_turns}")
    return -1 - quarter_turns


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the world size, (0, 1) without torch.distributed: the one helper
    the trainer (``pretrain.runtime.dist.rank`` / ``world_size``) reads them from."""
    if td.is_available() and td.is_initialized():
        return td.get_rank(), td.get_world_size()
    return 0, 1
