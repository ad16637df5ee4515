"""The MoCo dictionary: a FIFO of keys with a label beside each key, kept as registered buffers."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from negmine_core.conventions import NO_LABEL  # one definition of the label conventions


class LabeledQueue(nn.Module):
    """FIFO of ``size`` unit-norm keys (rows) with an integer label per key.

    Keys are stored (K, D), one key per row (MoCo stores the transpose, (D, K); the logits are the
    same). Initialised as MoCo does, ``normalize(randn)``, with labels ``NO_LABEL``. The pointer
    is a tensor, so enqueueing never syncs with the host; a batch that runs past the end wraps
    around to the start (modular indices rather than MoCo's ``K % B == 0`` assertion).

    Args:
        size: number of keys K.
        dim: key dimension D.
    """

    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        if size < 1 or dim < 1:
            raise ValueError(f"queue size and dim must be positive, got size={size}, dim={dim}")
        self.register_buffer("keys", F.normalize(torch.randn(size, dim), dim=1))
        self.register_buffer("labels", torch.full((size,), NO_LABEL, dtype=torch.long))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))

    @property
    def size(self) -> int:
        return self.keys.shape[0]

    def check_batch(self, global_batch: int) -> None:
        """A batch larger than the queue would overwrite its own keys in one enqueue."""
        if global_batch > self.size:
            raise ValueError(
                f"moco.queue_size ({self.size}) is smaller than the global batch ({global_batch}); "
                f"use a queue of at least {global_batch} keys (MoCo v2: 65536, CIFAR: 4096)"
            )

    @torch.no_grad()
    def enqueue(self, keys: torch.Tensor, labels: torch.Tensor | None = None) -> None:
        """Replace the oldest ``B`` entries with ``keys`` (B, D) and their ``labels`` (B,)."""
        b = keys.shape[0]
        if b > self.size:
            raise ValueError(f"cannot enqueue {b} keys into a queue of {self.size}")
        idx = (self.ptr + torch.arange(b, device=keys.device)) % self.size  # (B,)
        self.keys.index_copy_(0, idx, keys.detach().to(self.keys.dtype))
        if labels is None:
            labels = torch.full((b,), NO_LABEL, dtype=torch.long, device=keys.device)
        self.labels.index_copy_(0, idx, labels.to(self.labels.dtype))
        self.ptr.copy_((self.ptr + b) % self.size)
