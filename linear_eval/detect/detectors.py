"""The OOD / anomaly detectors by name: each maps a bank (training features of the in-distribution
classes) and a test set, both with their test-time views, to normality scores (higher = ID).

The maths is in :mod:`linear_eval.detect.scores` (Lunardi et al. 2025, FIRM, eqs. 3-7; Sun et al.
2022, KNN+); this module only decides which
features each detector reads and with which settings:

- ``s_con`` (FIRM eq. 3, k = 5), ``s_con*`` (eq. 4), ``s_center`` (eq. 7), ``knn+`` (Sun et al.
  2022), ``maha_tied`` / ``maha_global`` / ``maha_per_class`` (Lee et al. 2018 / CIDER code /
  SSD+), ``kde``, ``ocsvm`` (linear One-Class SVM, ν = 0.1): on the backbone (penultimate)
  features, FIRM's encoder output f(x) and CIDER's penultimate features.
- ``s_shift`` (eq. 5): s_con averaged over the 4 rotations, bank rotated by the same angle;
  ``s_ens`` (eq. 6): averaged over the 4 rotations × N random crops of the test image, each against
  the bank at that rotation (FIRM ``evaluate_oneclass.py``: the bank is never cropped).
- ``kappa`` (vMF-κ: κ alone) and ``knn_kappa`` (vMF-κ Table 2: k-NN, k = 5, on [μ, κ] with μ
  the unit-norm head output).

KNN+'s k: CIDER uses K = 100 on CIFAR-10's 50,000 training images (0.2% of the bank); we keep that
fraction, k = max(1, round(0.002 · N)), unless ``knn_plus_k`` is given. ``ocsvm`` (libsvm, O(N²))
is fitted on a seeded subsample of at most ``ocsvm_max_bank`` bank rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from linear_eval.detect import scores
from linear_eval.inputs.features import ViewSet
from negmine_core.registry import Registry

CIDER_K_FRACTION = 100 / 50_000


@dataclass(frozen=True)
class Settings:
    k: int = 5  # s_con / s_con* / s_shift / s_ens (FIRM main tables)
    knn_plus_k: int | None = None  # None: CIDER's fraction of the bank
    kappa_k: int = 5  # vMF-κ Table 2
    ocsvm_nu: float = 0.1
    ocsvm_max_bank: int = 10_000
    kde_bandwidth: float | None = None  # None: Scott's rule on the normalised bank
    seed: int = 0  # crop draws and the OC-SVM subsample


DEFAULT_SETTINGS = Settings()
Detector = Callable[[ViewSet, ViewSet, Settings], torch.Tensor]


def _k(k: int, bank: ViewSet) -> int:
    return max(1, min(k, len(bank.plain)))


def _s_shift(bank: ViewSet, test: ViewSet, s: Settings) -> torch.Tensor:
    angles = sorted(test.rotations)
    return scores.ensemble_knn_score(
        [bank.rotations[r].backbone for r in angles],
        [test.rotations[r].backbone for r in angles],
        _k(s.k, bank),
    )


def _s_ens(bank: ViewSet, test: ViewSet, s: Settings) -> torch.Tensor:
    pairs = [(bank.rotations[r], crop) for r in sorted(test.crops) for crop in test.crops[r]]
    return scores.ensemble_knn_score(
        [b.backbone for b, _ in pairs], [t.backbone for _, t in pairs], _k(s.k, bank)
    )


def _knn_plus(bank: ViewSet, test: ViewSet, s: Settings) -> torch.Tensor:
    k = s.knn_plus_k or round(CIDER_K_FRACTION * len(bank.plain))
    return scores.knn_plus(bank.plain.backbone, test.plain.backbone, _k(k, bank))


def _maha(covariance: str) -> Detector:
    def score(bank: ViewSet, test: ViewSet, s: Settings) -> torch.Tensor:
        b = bank.plain
        return scores.mahalanobis(b.backbone, b.labels, test.plain.backbone, covariance)

    return score


def _ocsvm(bank: ViewSet, test: ViewSet, s: Settings) -> torch.Tensor:
    b = bank.plain.backbone
    if b.shape[0] > s.ocsvm_max_bank:
        g = torch.Generator().manual_seed(s.seed)
        b = b[torch.randperm(b.shape[0], generator=g)[: s.ocsvm_max_bank]]
    return scores.ocsvm_score(b, test.plain.backbone, nu=s.ocsvm_nu)


def _knn_kappa(bank: ViewSet, test: ViewSet, s: Settings) -> torch.Tensor:
    b, t = bank.plain, test.plain
    return scores.knn_with_kappa(b.head, b.kappa, t.head, t.kappa, _k(s.kappa_k, bank))


#: The detectors by name, in the one registry class of the code base (``negmine_core.registry``).
DETECTORS: Registry[Detector] = Registry("detector")
for _name, _fn in {
    "s_con": lambda b, t, s: scores.knn_score(b.plain.backbone, t.plain.backbone, _k(s.k, b)),
    "s_con*": lambda b, t, s: scores.knn_score_norm(b.plain.backbone, t.plain.backbone, _k(s.k, b)),
    "s_shift": _s_shift,
    "s_ens": _s_ens,
    "s_center": lambda b, t, s: scores.center_score(b.plain.backbone, t.plain.backbone),
    "knn+": _knn_plus,
    "maha_tied": _maha("tied"),
    "maha_global": _maha("global"),
    "maha_per_class": _maha("per_class"),
    "kde": lambda b, t, s: scores.kde_score(b.plain.backbone, t.plain.backbone, s.kde_bandwidth),
    "ocsvm": _ocsvm,
    "kappa": lambda b, t, s: scores.kappa_score(t.plain.kappa),
    "knn_kappa": _knn_kappa,
}.items():
    DETECTORS.register(_name)(_fn)
DEFAULT = tuple(DETECTORS)


def unavailable(name: str, bank: ViewSet, test: ViewSet) -> str | None:
    """Why ``name`` cannot run on these feature sets (None if it can)."""
    if name not in DETECTORS:
        return f"unknown detector; choose from {', '.join(DETECTORS)}"
    if name in ("kappa", "knn_kappa") and (test.plain.kappa is None or bank.plain.kappa is None):
        return "the model has no kappa head"
    if name == "s_shift" and not (test.rotations and set(test.rotations) <= set(bank.rotations)):
        return "needs the rotated views (rotations were not extracted)"
    if name == "s_ens" and not (test.crops and set(test.crops) <= set(bank.rotations)):
        return "needs the random-crop views (crops were not extracted)"
    return None


Scorer = Callable[[ViewSet], torch.Tensor]


def _ocsvm_fit(bank: ViewSet, s: Settings) -> Callable[[torch.Tensor], torch.Tensor]:
    b = bank.plain.backbone
    if b.shape[0] > s.ocsvm_max_bank:
        g = torch.Generator().manual_seed(s.seed)
        b = b[torch.randperm(b.shape[0], generator=g)[: s.ocsvm_max_bank]]
    return scores.ocsvm_fit(b, nu=s.ocsvm_nu)


#: Detectors whose fit is costly (a pseudo-inverse, an O(N^2) SVM) fit once per bank here; the
#: others close over the bank (their work is per test point).
FITS: dict[str, Callable[[ViewSet, Settings], Callable[[torch.Tensor], torch.Tensor]]] = {
    "maha_tied": lambda b, s: scores.mahalanobis_fit(b.plain.backbone, b.plain.labels, "tied"),
    "maha_global": lambda b, s: scores.mahalanobis_fit(b.plain.backbone, b.plain.labels, "global"),
    "maha_per_class": lambda b, s: scores.mahalanobis_fit(
        b.plain.backbone, b.plain.labels, "per_class"
    ),
    "ocsvm": _ocsvm_fit,
}


def fit(name: str, bank: ViewSet, settings: Settings) -> Scorer:
    """Detector ``name`` fitted once on ``bank``: a scorer ``test -> normality scores (M,)``,
    float64 on CPU, for any number of test sets (OpenOOD's setup-then-postprocess)."""
    if name not in DETECTORS:
        raise ValueError(f"detector {name!r}: unknown detector; choose from {', '.join(DETECTORS)}")
    fitted = FITS[name](bank, settings) if name in FITS else None

    def scorer(test: ViewSet) -> torch.Tensor:
        why = unavailable(name, bank, test)
        if why is not None:
            raise ValueError(f"detector {name!r}: {why}")
        if fitted is not None:
            return torch.as_tensor(fitted(test.plain.backbone)).double().cpu()
        return torch.as_tensor(DETECTORS[name](bank, test, settings)).double().cpu()

    return scorer


def score(name: str, bank: ViewSet, test: ViewSet, settings: Settings) -> torch.Tensor:
    """Normality scores (M,) of detector ``name``, float64 on CPU: :func:`fit` then score, for
    one test set."""
    why = unavailable(name, bank, test)
    if why is not None:
        raise ValueError(f"detector {name!r}: {why}")
    return fit(name, bank, settings)(test)


def check(names: list[str]) -> list[str]:
    unknown = [n for n in names if n not in DETECTORS]
    if unknown:
        raise ValueError(f"unknown detector(s) {unknown}; choose from {', '.join(DETECTORS)}")
    return names


def settings_dict(s: Settings) -> dict[str, Any]:
    return {k: getattr(s, k) for k in Settings.__dataclass_fields__}
