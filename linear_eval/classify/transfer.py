"""Transfer evaluation: a frozen backbone's features of another labelled dataset, scored by a
linear probe (repeated over seeds) and by kNN.

The datasets and their resizing come from :mod:`linear_eval.inputs.eval_datasets`: any of its
labelled names, or ``folder:<path>`` for a labelled torchvision ImageFolder layout
(``<path>/train/<class>/*`` and ``<path>/test/<class>/*``, ``val/`` standing for a missing
``test/``). Seed protocol: 32-px sets such as CIFAR and CINIC-10 upsampled to 224, STL-10 at its
native 96, fine-grained sets and ``folder:`` sets resize 256 + centre crop 224, normalised with the
pretraining run's mean and std; features are extracted by
:mod:`linear_eval.inputs.features`. This module only scores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from linear_eval.classify import knn, linear, probe

DEFAULT_DATASETS = ("cifar10", "cifar100", "stl10", "cinic10")


def num_classes(*labels: torch.Tensor) -> int:
    """1 + the largest label (labels are class indices)."""
    return int(max(int(y.max()) for y in labels)) + 1


def evaluate(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    test_labels: torch.Tensor,
    recipe: probe.Protocol,
    seeds: Sequence[int] = (0,),
    knn_presets: Sequence[str] = ("cifar",),
) -> dict[str, Any]:
    """Linear probe and kNN of one transfer dataset.

    Returns:
        ``{"linear": record, "knn": {variant: record}, "num_classes", "train_size",
        "test_size"}`` (records as :func:`linear_eval.classify.linear.evaluate` and
        :func:`linear_eval.classify.knn.evaluate`).
    """
    if (train_labels < 0).any() or (test_labels < 0).any():
        raise ValueError("transfer needs labelled train and test sets (found label -1)")
    c = num_classes(train_labels, test_labels)
    lin, _ = linear.evaluate(
        train_features, train_labels, test_features, test_labels, c, recipe, seeds
    )
    near, _ = knn.evaluate(
        train_features, train_labels, test_features, test_labels, c, knn_presets, majority=()
    )
    return {
        "linear": lin,
        "knn": near,
        "num_classes": c,
        "train_size": int(train_labels.numel()),
        "test_size": int(test_labels.numel()),
    }
