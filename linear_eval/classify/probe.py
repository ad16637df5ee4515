"""Linear probes on a frozen backbone: the seed protocols (SGD with step decay) and the L-BFGS
logistic regression, on cached features or, for the SGD protocols, on augmented images.

SGD protocols (a new ``Linear``, weight N(0, 0.01), bias 0; SGD momentum 0.9, weight decay 0; lr
×0.1 at each milestone epoch; the backbone in ``eval()`` so its BatchNorm statistics stay as
pretrained):

- ``moco``: lr 30, batch 256, 100 epochs, steps at 60/80 (facebookresearch/moco ``main_lincls.py``
  @ b8ae0d9 with its README's ``--lr 30.0``).
- ``mioc``: lr 10, batch 128, 60 epochs, steps at 30/40/50: the MiOC ImageNet-100 protocol
  (MiOC; DJ-CHB/MiOC-Official @ 525ad80 ``Code/conf/lincls_params.py``).
- ``transfer``: lr 3, batch 128, 100 epochs, steps at 50/70/90 (the seed's transfer protocol).
- ``lbfgs``: multinomial logistic regression by full-batch L-BFGS with the L2 strength chosen on
  held-out training features (:mod:`linear_eval.classify.logreg`); the fast default for small data.

NOTE: on cached features the SGD protocols train on the un-augmented training images (the fast
path); :func:`train_on_images` draws a fresh RandomResizedCrop + flip each epoch as
``main_lincls.py`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from linear_eval.classify import logreg

MOMENTUM = 0.9  # SGD momentum of every SGD protocol (main_lincls.py's default)


@dataclass(frozen=True)
class Protocol:
    """One linear-probe recipe; ``solver`` is ``sgd`` or ``lbfgs`` (then only ``name`` counts)."""

    name: str
    solver: str = "sgd"
    epochs: int = 100
    lr: float = 30.0
    milestones: tuple[int, ...] = (60, 80)
    batch_size: int = 256
    weight_decay: float = 0.0
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        if self.solver == "lbfgs":
            return {
                "name": self.name,
                "solver": "lbfgs",
                "l2_grid": list(logreg.L2_GRID),
                "val_fraction": logreg.VAL_FRACTION,
                "source": self.source,
            }
        return {
            "name": self.name,
            "solver": "sgd",
            "epochs": self.epochs,
            "lr": self.lr,
            "milestones": list(self.milestones),
            "batch_size": self.batch_size,
            "weight_decay": self.weight_decay,
            "momentum": MOMENTUM,
            "source": self.source,
        }


PROTOCOLS: dict[str, Protocol] = {
    "lbfgs": Protocol("lbfgs", "lbfgs", source="Kornblith et al. 2019 fixed-feature protocol"),
    "moco": Protocol(
        "moco",
        epochs=100,
        lr=30.0,
        milestones=(60, 80),
        batch_size=256,
        source="facebookresearch/moco main_lincls.py",
    ),
    "mioc": Protocol(
        "mioc",
        epochs=60,
        lr=10.0,
        milestones=(30, 40, 50),
        batch_size=128,
        source="MiOC (Jain et al. 2025) ImageNet-100, Code/conf/lincls_params.py",
    ),
    "transfer": Protocol(
        "transfer",
        epochs=100,
        lr=3.0,
        milestones=(50, 70, 90),
        batch_size=128,
        source="seed transfer protocol",
    ),
}


#: The protocol whose numbers the default command (``python -m linear_eval --ckpt X``: kNN and the
#: SGD probe) stores, and so what ``table`` and the results pages report as ``linear_top1``.
DEFAULT_COMMAND = "moco"


def describe(name: str) -> str:
    """A probe in words, for the header line of ``compare`` and ``table``."""
    if name == "lbfgs":
        return "L-BFGS (python -m linear_eval linear's and all's default)"
    where = " (python -m linear_eval --ckpt's default)" if name == DEFAULT_COMMAND else ""
    return f"SGD, {name} recipe{where}"


def protocol(name: str) -> Protocol:
    if name not in PROTOCOLS:
        raise ValueError(f"unknown linear protocol {name!r}; choose one of {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]


def new_classifier(in_dim: int, num_classes: int) -> nn.Linear:
    fc = nn.Linear(in_dim, num_classes)
    nn.init.normal_(fc.weight, 0.0, 0.01)
    nn.init.zeros_(fc.bias)
    return fc


def check_milestones(milestones: Sequence[int], flag: str = "--milestones") -> None:
    """Refuse what ``MultiStepLR`` would run silently but differently from what was asked: no
    epoch at all, an epoch <= 0 (never reached), or epochs out of order or repeated."""
    if not milestones:
        raise ValueError(
            f"{flag} needs one or more epochs (the lr is multiplied by 0.1 at each); "
            "for a constant lr give one at or past --epochs"
        )
    if min(milestones) < 1 or list(milestones) != sorted(set(milestones)):
        raise ValueError(
            f"{flag} {' '.join(map(str, milestones))}: give increasing epochs >= 1 "
            "(the lr is multiplied by 0.1 at the start of each)"
        )


def _optimizer(fc: nn.Linear, lr: float, weight_decay: float, milestones: Sequence[int]) -> tuple:
    opt = torch.optim.SGD(fc.parameters(), lr=lr, momentum=MOMENTUM, weight_decay=weight_decay)
    return opt, torch.optim.lr_scheduler.MultiStepLR(opt, list(milestones), gamma=0.1)


def lr_changes(lr_log: Sequence[float]) -> dict[str, float]:
    """``{"0": lr, "60": lr', ...}``: the epochs at which the lr the optimizer held changed."""
    return {str(e): lr for e, lr in enumerate(lr_log) if e == 0 or lr != lr_log[e - 1]}


def train_on_features(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    epochs: int = 100,
    lr: float = 30.0,
    milestones: Sequence[int] = (60, 80),
    batch_size: int = 256,
    weight_decay: float = 0.0,
    seed: int = 0,
    lr_log: list[float] | None = None,
) -> nn.Linear:
    """Fit the linear classifier by SGD on fixed features (N, F) with labels (N,); the lr is
    multiplied by 0.1 at each epoch of ``milestones`` (stepped once per epoch). ``lr_log``, when
    given, receives the lr the optimizer held in each epoch."""
    g = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fc = new_classifier(features.shape[1], num_classes).to(features.device)
    opt, sched = _optimizer(fc, lr, weight_decay, milestones)
    labels = labels.to(features.device)
    for _ in range(epochs):
        if lr_log is not None:
            lr_log.append(opt.param_groups[0]["lr"])
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
    milestones: Sequence[int] = (60, 80),
    weight_decay: float = 0.0,
    seed: int = 0,
    lr_log: list[float] | None = None,
) -> nn.Linear:
    """Fit the classifier on augmented images through the frozen ``backbone`` (kept in eval mode);
    ``milestones`` and ``lr_log`` as in :func:`train_on_features`.

    Raises:
        RuntimeError: if any backbone parameter or buffer (BatchNorm running statistics
            included) changed: MoCo's ``sanity_check``.
    """
    before = {k: v.detach().clone() for k, v in backbone.state_dict().items()}
    backbone.eval().requires_grad_(False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fc = new_classifier(feature_dim, num_classes).to(device)
    opt, sched = _optimizer(fc, lr, weight_decay, milestones)
    for _ in range(epochs):
        if lr_log is not None:
            lr_log.append(opt.param_groups[0]["lr"])
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
    return fc(features.to(fc.weight.device, fc.weight.dtype))


def fit_predict(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    num_classes: int,
    recipe: Protocol,
    seed: int = 0,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Train ``recipe`` on (N, F) features and score (M, F) test features: (M, C) scores on CPU
    and what the solver chose (``l2`` for L-BFGS) or ran (``lr_by_epoch`` for SGD)."""
    if recipe.solver == "lbfgs":
        fc, info = logreg.train(train_features, train_labels, num_classes, seed=seed)
    elif recipe.solver == "sgd":
        lr_log: list[float] = []
        fc = train_on_features(
            train_features,
            train_labels,
            num_classes,
            epochs=recipe.epochs,
            lr=recipe.lr,
            milestones=list(recipe.milestones),
            batch_size=recipe.batch_size,
            weight_decay=recipe.weight_decay,
            seed=seed,
            lr_log=lr_log,
        )
        info = {"lr_by_epoch": lr_changes(lr_log)}
    else:
        raise ValueError(f"unknown solver {recipe.solver!r}; use 'sgd' or 'lbfgs'")
    return predict(fc, test_features).cpu(), info
