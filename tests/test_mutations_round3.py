"""Tests for mutations the round-3 audit found surviving (issue 52, items 16-20): each fails
when its mutation is applied (see the test's docstring for which)."""

from __future__ import annotations

import pytest

from pretrain import config
from pretrain.config import ConfigError


@pytest.mark.parametrize(
    ("override", "key"),
    [("data.crop_scale=[0.2, 1.5]", "data.crop_scale"),  # C01: the upper bound of 1
     ("data.subset=1.5", "data.subset")],  # C02: a fraction must lie below 1
)  # fmt: skip
def test_crop_scale_above_1_and_a_fractional_subset_above_1_are_refused(override, key):
    """C01 (``crop_scale[1] <= 1`` dropped) and C02 (a fractional ``data.subset`` above 1
    accepted) make these load."""
    with pytest.raises(ConfigError, match=f"config key '{key}'"):
        config.load("digits_moco.yaml", [override])
    config.load("digits_moco.yaml", [override.replace("1.5", "1")])  # the edge is valid


def test_the_kappa_heads_weights_are_typed_like_the_losses_own():
    """C04: without the kappa head's annotations in ``typed_kwargs``, YAML's ``1e-2`` (a string
    to YAML 1.1) stays a string."""
    cfg = config.load("digits_kappa.yaml", ["loss.kwargs.kappa_lambda_align=1e-2"])
    value = cfg.loss.kwargs["kappa_lambda_align"]
    assert value == 0.01 and isinstance(value, float)
