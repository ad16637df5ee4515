"""Linear probe on a frozen backbone: MoCo's protocol (``main_lincls.py``), on images or on cached
features.

MoCo protocol: a new ``Linear`` (weight N(0, 0.01), bias 0) on the pooled backbone features, SGD
(momentum 0.9, weight decay 0) at lr 30, batch 256, 100 epochs, ×0.1 at epochs 60 and 80, the
backbone in ``eval()`` so its BatchNorm statistics stay as pretrained.

NOTE: the ``features`` path trains on features of the un-augmented training images (the fast path
the toolkit offers for small data); the ``images`` path draws a fresh RandomResizedCrop + flip each
epoch as ``main_lincls.py`` does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader


def new_classifier(in_dim: int, num_classes: int) -> nn.Linear:
    fc = nn.Linear(in_dim, num_classes)
    nn.init.normal_(fc.weight, 0.0, 0.01)
    nn.init.zeros_(fc.bias)
    return fc


def _optimizer(fc: nn.Linear, lr: float, weight_decay: float, milestones: list[int]) -> tuple:
    opt = torch.optim.SGD(fc.parameters(), lr=lr, momentum=0.9, weight_decay=weight_decay)
    return opt, torch.optim.lr_scheduler.MultiStepLR(opt, milestones, gamma=0.1)


def train_on_features(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    epochs: int = 100,
    lr: float = 30.0,
    milestones: list[int] | None = None,
    batch_size: int = 256,
    weight_decay: float = 0.0,
    seed: int = 0,
) -> nn.Linear:
    """Fit the linear classifier on fixed features (N, F) with labels (N,)."""
    g = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fc = new_classifier(features.shape[1], num_classes).to(features.device)
    opt, sched = _optimizer(fc, lr, weight_decay, milestones or [60, 80])
    for _ in range(epochs):
        order = torch.randperm(features.shape[0], generator=g).to(features.device)
        for idx in order.split(batch_size):
            loss = F.cross_entropy(fc(features[idx]), labels[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sched.step()
    return fc


def train_on_images(
    backbone: nn.Module,
    loader: DataLoader,
    num_classes: int,
    feature_dim: int,
    device: torch.device,
    epochs: int = 100,
    lr: float = 30.0,
    milestones: list[int] | None = None,
    weight_decay: float = 0.0,
    seed: int = 0,
) -> nn.Linear:
    """Fit the classifier on augmented images through the frozen ``backbone`` (kept in eval mode).

    Raises:
        RuntimeError: if any backbone parameter or buffer changed (MoCo's ``sanity_check``).
    """
    before = {k: v.detach().clone() for k, v in backbone.state_dict().items()}
    backbone.eval().requires_grad_(False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fc = new_classifier(feature_dim, num_classes).to(device)
    opt, sched = _optimizer(fc, lr, weight_decay, milestones or [60, 80])
    for _ in range(epochs):
        for x, y in loader:
            with torch.no_grad():
                f = backbone(x.to(device, non_blocking=True))
            loss = F.cross_entropy(fc(f), y.to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sched.step()
    changed = [k for k, v in backbone.state_dict().items() if not torch.equal(v, before[k])]
    if changed:
        raise RuntimeError(f"the frozen backbone changed during the linear probe: {changed[:5]}")
    return fc


@torch.no_grad()
def predict(fc: nn.Linear, features: torch.Tensor) -> torch.Tensor:
    """Class scores (N, C)."""
    return fc(features)
