"""kappa (the vMF concentration of a kappa head) as the classifier's confidence, as numbers: κ of
correctly vs wrongly classified samples with a Mann-Whitney U test, and κ per corruption severity
with Spearman's rho ([004] vMF kappa, Table 1). ``linear_eval.report.figures`` draws them."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from linear_eval.classify.geometry import ArrayLike, as_array, same_length


def correct_vs_wrong(kappa: ArrayLike, correct: ArrayLike) -> tuple[np.ndarray, np.ndarray, dict]:
    """kappa (N,) and correctness (N,) as arrays, and the record: group sizes and means, and the
    two-sided Mann-Whitney U test. ``u`` is U of the correct group (scipy's convention),
    ``effect_size`` = U / (n_c * n_w); with an empty group ``u`` and ``p_value`` are None and
    ``note`` says why."""
    k = as_array(kappa, "kappa", 1)
    ok = as_array(correct, "correct", 1, bool)
    same_length(kappa=k, correct=ok)
    kc, kw = k[ok], k[~ok]
    out: dict[str, Any] = {
        "n_correct": len(kc),
        "n_wrong": len(kw),
        "mean_correct": float(kc.mean()) if len(kc) else None,
        "mean_wrong": float(kw.mean()) if len(kw) else None,
        "u": None,
        "p_value": None,
        "effect_size": None,
    }
    if len(kc) and len(kw):
        res = stats.mannwhitneyu(kc, kw, alternative="two-sided")
        u = float(res.statistic)
        out |= {"u": u, "p_value": float(res.pvalue), "effect_size": u / (len(kc) * len(kw))}
    else:
        out["note"] = f"no {'wrongly' if len(kc) else 'correctly'} classified samples: no test"
    return k, ok, out


def _spearman(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    with warnings.catch_warnings():  # constant input: rho is NaN, reported as such
        warnings.simplefilter("ignore")
        res = stats.spearmanr(a, b)
    return float(res.statistic), float(res.pvalue)


def _per_severity(sev: np.ndarray, k: np.ndarray) -> tuple[dict[int, float], dict[int, float]]:
    levels = np.unique(sev)
    return (
        {int(s): float(k[sev == s].mean()) for s in levels},
        {int(s): float(k[sev == s].std()) for s in levels},
    )


def severity_trend(
    severity: ArrayLike, kappa: ArrayLike, kinds: Sequence[str] | None = None
) -> dict[str, Any]:
    """Mean kappa (± population std) per corruption severity (0 = clean .. 5) and Spearman rho
    between kappa and severity over samples, overall and per corruption kind. The clean samples
    (severity 0) belong to every kind, whatever their entry in ``kinds``."""
    s = as_array(severity, "severity", 1, np.int64)
    k = as_array(kappa, "kappa", 1)
    same_length(severity=s, kappa=k)
    if s.min() < 0 or s.max() > 5:
        raise ValueError(f"severity must be in 0..5 (0 = clean), got {s.min()}..{s.max()}")
    rho, p = _spearman(k, s)
    mean, std = _per_severity(s, k)
    out: dict[str, Any] = {"spearman_rho": rho, "spearman_p": p, "n": len(s)}
    out |= {"mean_kappa_per_severity": mean, "std_kappa_per_severity": std, "per_kind": {}}
    if kinds is not None:
        kd = as_array(kinds, "kinds", 1, object).astype(str)
        same_length(severity=s, kinds=kd)
        for name in sorted(str(n) for n in set(kd[s > 0])):
            m = (kd == name) | (s == 0)
            r, pk = _spearman(k[m], s[m])
            mk, sk = _per_severity(s[m], k[m])
            out["per_kind"][name] = {"spearman_rho": r, "spearman_p": pk, "n": int(m.sum())}
            out["per_kind"][name] |= {"mean_kappa_per_severity": mk, "std_kappa_per_severity": sk}
    return out
