"""Detectors fitted once on a bank (ID training features and labels) that then score any number
of test sets; each score is a normality score (higher = ID) from :mod:`linear_eval.detect.scores`.

``knn`` is OpenOOD v1.5's KNN postprocessor (Sun et al. 2022, https://arxiv.org/abs/2204.06507):
L2-normalised penultimate features, score = −(distance to the K-th nearest training feature),
K = 50 as OpenOOD's ``configs/postprocessors/knn.yml`` for CIFAR (= :func:`scores.knn_plus`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from linear_eval.detect import scores
from negmine_core.registry import Registry

Scorer = Callable[[torch.Tensor], torch.Tensor]
KNN_K = 50  # OpenOOD's knn.yml for CIFAR
S_CON_K = 5  # FIRM's s_con


def _knn(k: int) -> Callable[[torch.Tensor, torch.Tensor], Scorer]:
    def fit(bank: torch.Tensor, labels: torch.Tensor) -> Scorer:
        unit = F.normalize(bank.float(), dim=1)  # normalised once
        return lambda test: scores.knn_plus(unit, test, k)

    return fit


def _s_con(bank: torch.Tensor, labels: torch.Tensor) -> Scorer:
    unit = F.normalize(bank.float(), dim=1)
    return lambda test: scores.knn_score(unit, test, S_CON_K)


def _maha(bank: torch.Tensor, labels: torch.Tensor) -> Scorer:
    return scores.mahalanobis_fit(bank, labels, "tied")  # means and precision once per bank


def _center(bank: torch.Tensor, labels: torch.Tensor) -> Scorer:
    return lambda test: scores.center_score(bank, test)


#: OpenOOD's detectors by name, in the one registry class (``negmine_core.registry``).
FITTERS: Registry[Callable[[torch.Tensor, torch.Tensor], Scorer]] = Registry("OpenOOD detector")
for _name, _fit in {
    "knn": _knn(KNN_K),
    "s_con": _s_con,
    "maha_tied": _maha,
    "s_center": _center,
}.items():
    FITTERS.register(_name)(_fit)
DESCRIPTIONS = {
    "knn": f"OpenOOD KNN postprocessor, K={KNN_K}, L2-normalised backbone features",
    "s_con": f"mean top-{S_CON_K} cosine similarity (FIRM s_con)",
    "maha_tied": "Mahalanobis, class means + tied covariance (Lee et al. 2018)",
    "s_center": "-(1 - cos) to the mean training feature",
}


def fit(name: str, bank: torch.Tensor, labels: torch.Tensor) -> Scorer:
    """The scorer of detector ``name`` fitted on ``bank`` (N, D) with ``labels`` (N,)."""
    if name not in FITTERS:
        raise ValueError(f"unknown OpenOOD detector {name!r}; choose from {', '.join(FITTERS)}")
    return FITTERS[name](bank, labels)
