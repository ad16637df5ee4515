"""``negatives.kwargs`` and ``loss.kwargs`` are typed by the constructor's annotations, as the typed
config keys are: YAML 1.1 reads ``1e-3`` (no dot) as a string, which used to reach the strategy
and fail with a TypeError deep in the first training step."""

from __future__ import annotations

import pytest

from pretrain import build, config
from pretrain.config import ConfigError


def test_scientific_notation_in_kwargs_becomes_a_float(tmp_path):
    (tmp_path / "run.yaml").write_text(
        "negatives:\n  name: mioc\n  kwargs:\n    gamma: 1e-3\n    nu: 1e-1\n"
        "loss:\n  name: debiased\n  kwargs:\n    tau_plus: 1e-1\n"
    )
    cfg = config.load(str(tmp_path / "run.yaml"), ["negatives.kwargs.tol=1e-4"])
    assert cfg.negatives.kwargs == {"gamma": 0.001, "nu": 0.1, "tol": 0.0001}
    assert cfg.loss.kwargs == {"tau_plus": 0.1}
    assert all(type(v) is float for v in cfg.negatives.kwargs.values())
    strategy = build.strategy(cfg)  # the values the strategy gets are numbers
    assert strategy.svm.gamma == 0.001 and strategy.svm.nu == 0.1
    assert build.loss_fn(cfg, 10).tau_plus == 0.1


def test_an_int_widens_and_a_sequence_is_typed_elementwise():
    cfg = config.load("digits_moco.yaml", ["negatives.name=outliers",
                                           "negatives.kwargs.ratio=1",
                                           "negatives.kwargs.patch_area=[1e-2, 0.1]"])  # fmt: skip
    assert cfg.negatives.kwargs == {"ratio": 1.0, "patch_area": [0.01, 0.1]}
    assert type(cfg.negatives.kwargs["ratio"]) is float


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["negatives.name=mioc", "negatives.kwargs.gamma=abc"],
         r"^config key 'negatives.kwargs.gamma' in the config expects float, got 'abc' \(str\)$"),
        (["negatives.name=mioc", "negatives.kwargs.nu=inf"],
         r"^config key 'negatives.kwargs.nu' in the config must be a finite number, got inf$"),
        (["negatives.name=mochi", "negatives.kwargs.num_hard=1e3"],
         r"^config key 'negatives.kwargs.num_hard' in the config expects int, got '1e3'"),
        (["loss.name=debiased", "loss.kwargs.tau_plus=[0.1]"],
         r"^config key 'loss.kwargs.tau_plus' in the config expects float"),
    ],
)  # fmt: skip
def test_a_value_that_does_not_fit_is_a_config_error(overrides, message):
    with pytest.raises(ConfigError, match=message):
        config.load("digits_moco.yaml", overrides)
