"""The online linear probe (``eval.online_probe``): a linear classifier on the query backbone's
pooled features of view 1, trained during pretraining with its own SGD on detached features (no
gradient reaches the encoder), as solo-learn's and lightly's online classifiers do. Its numbers are
logged as ``online_train_top1`` / ``online_test_top1``: they are not the offline linear probe of
``python -m linear_eval`` (frozen, converged features, its own protocol) and are never reported as
such.

Images with a negative label (unlabelled, outliers, rotations) are left out through a weight mask,
so the step has no host sync; under DDP each rank trains on its shard and the gradients are
averaged, so every rank holds the same probe. Weights, optimizer state and the epoch's running
accuracy are in the checkpoint: a resumed run replays the probe exactly.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as td
import torch.nn.functional as F
from torch import nn

MOMENTUM = 0.9  # solo-learn's online classifier: SGD, momentum 0.9, no weight decay


class OnlineProbe(nn.Module):
    """Linear probe on ``feature_dim`` features for ``num_classes`` classes."""

    def __init__(self, *, feature_dim: int, num_classes: int, lr: float) -> None:
        super().__init__()
        self.fc = nn.Linear(feature_dim, num_classes)
        self.register_buffer("correct", torch.zeros((), dtype=torch.float64))
        self.register_buffer("seen", torch.zeros((), dtype=torch.float64))
        self.opt = torch.optim.SGD(self.fc.parameters(), lr=lr, momentum=MOMENTUM)

    def train_step(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        """One SGD step on detached ``features`` (N, F) with ``labels`` (N,); labels < 0 skipped."""
        x = features.detach().float()
        weight = (labels >= 0).to(x.dtype)
        logits = self.fc(x)
        per_sample = F.cross_entropy(logits, labels.clamp(min=0), reduction="none")
        loss = (per_sample * weight).sum() / weight.sum().clamp(min=1.0)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if td.is_available() and td.is_initialized() and td.get_world_size() > 1:
            for p in self.fc.parameters():
                td.all_reduce(p.grad)
                p.grad /= td.get_world_size()
        self.opt.step()
        with torch.no_grad():
            hit = (logits.argmax(1) == labels).to(torch.float64) * weight.double()
            self.correct += hit.sum()
            self.seen += weight.double().sum()

    def take_train_top1(self) -> float:
        """Running top-1 (%) of this epoch's steps on this rank's labelled images; resets it."""
        top1 = 100.0 * float(self.correct) / max(float(self.seen), 1.0)
        self.correct.zero_()
        self.seen.zero_()
        return top1

    @torch.no_grad()
    def top1(self, features: torch.Tensor, labels: torch.Tensor) -> float:
        """Top-1 (%) on held-out ``features`` (N, F) (labels < 0 ignored)."""
        pred = self.fc(features.to(self.fc.weight.device).float()).argmax(1).cpu()
        keep = labels >= 0
        return 100.0 * float((pred[keep] == labels[keep]).double().mean()) if keep.any() else 0.0

    def checkpoint_state(self) -> dict[str, Any]:
        return {"module": self.state_dict(), "optimizer": self.opt.state_dict()}

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        self.load_state_dict(state["module"])
        self.opt.load_state_dict(state["optimizer"])
