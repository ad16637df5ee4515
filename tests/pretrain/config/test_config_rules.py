"""The config's rules as data (pretrain/config/rules.py): a bound states its numbers once, every
rule names a real key, and validate() runs them in order."""

from __future__ import annotations

import dataclasses
import string
from pathlib import Path
from types import SimpleNamespace

import pytest

from pretrain import config
from pretrain.config import rules as config_rules
from pretrain.config.rules import Facts, bound


def cfg_ns(**values: float) -> SimpleNamespace:
    return SimpleNamespace(x=SimpleNamespace(**values))


@pytest.mark.parametrize(
    "rule, why, ok, bad",
    [
        (bound("x.y", 0, 1), "must lie in [0, 1]", [0, 0.5, 1], [-0.1, 1.1]),
        (bound("x.y", 0, 1, high_open=True), "must lie in [0, 1)", [0, 0.99], [1, -1]),
        (bound("x.y", 0, low_open=True), "must be positive", [1e-9, 3], [0, -1]),
        (bound("x.y", 2), "must be >= 2", [2, 5], [1]),
        (bound("x.y", -1, note="-1 = automatic"), "must be >= -1 (-1 = automatic)",
         [-1, 0], [-2]),
    ],
)  # fmt: skip
def test_a_bound_makes_its_check_and_its_message_from_the_same_numbers(rule, why, ok, bad):
    facts = Facts(loss=None, strategy=None)
    assert rule.why == why
    assert all(rule.error(cfg_ns(y=v), facts) is None for v in ok)
    for v in bad:
        assert rule.error(cfg_ns(y=v), facts) == f"config key 'x.y' = {v!r} {why}"


def test_every_rule_names_real_keys_and_the_defaults_pass():
    default = config.Config()
    keys = {
        f"{s.name}.{f.name}"
        for s in dataclasses.fields(default)
        if dataclasses.is_dataclass(getattr(default, s.name))
        for f in dataclasses.fields(getattr(default, s.name))
    } | {  # the top-level keys (seed)
        s.name
        for s in dataclasses.fields(default)
        if not dataclasses.is_dataclass(getattr(default, s.name))
    }
    names = config_rules.registry_names()
    facts = config_rules.facts(default.loss.name, default.negatives.name)
    for rule in config_rules.RULES:
        assert rule.key in keys, rule.key
        assert isinstance(rule.holds, config_rules.Cond), rule.key  # one language
        assert rule.key in rule.holds.keys <= keys, rule.key  # reads its own key, real keys
        fields = [f for _, f, _, _ in string.Formatter().parse(rule.why) if f]
        assert all(f in keys or f in names for f in fields), (rule.key, fields)
        assert rule.error(default, facts) is None, rule.key


def test_validate_raises_the_first_failing_rule():
    cfg = config.load("digits_moco.yaml")
    bad = dataclasses.replace(cfg, moco=dataclasses.replace(cfg.moco, momentum=2.0),
                              model=dataclasses.replace(cfg.model, bn_splits=3))  # fmt: skip
    with pytest.raises(config.ConfigError, match=r"^config key 'moco.momentum' = 2.0 must lie"):
        config.validate(bad)  # moco.momentum's rule runs before model.bn_splits' (64 % 3 != 0)


def test_conditions_evaluate_without_eval_and_print_what_they_check():
    """A condition is data: its text is what the page shows, its value computed by the same
    object (no eval of the text)."""
    K = config_rules.key
    cond = ~K("x.a") | ((K("x.b") > 0) & K("x.c").isin(("p", "q")))
    assert str(cond) == "not x.a or (x.b > 0 and x.c in ('p', 'q'))"
    ns = lambda a, b, c: SimpleNamespace(x=SimpleNamespace(a=a, b=b, c=c))  # noqa: E731
    assert cond(ns(False, 0, "z"), {}) and cond(ns(True, 1, "q"), {})
    assert not cond(ns(True, 0, "q"), {}) and not cond(ns(True, 1, "z"), {})
    source = (Path(config_rules.__file__)).read_text()
    assert "eval(" not in source


def test_split_batchnorm_rule_is_stated_once(monkeypatch):
    """The config rule (train.batch_size) and the rank-count check (the per-rank batch) call one
    function, rules.bn_splits_fit: changing it changes both; the config's message is quoted on
    docs/troubleshooting.md."""
    from pretrain.config import rules
    from pretrain.engine import world
    from tests.helpers.troubleshooting_quotes import assert_documented

    cfg = config.load("digits_moco.yaml", ["train.batch_size=64", "model.bn_splits=2"])
    world.check(cfg, 2)  # 32 per rank, 2 splits of 16
    with pytest.raises(config.ConfigError) as e:
        config.validate(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, bn_splits=3)))
    assert_documented(str(e.value))
    monkeypatch.setattr(rules, "bn_splits_fit", lambda batch, splits: False)
    with pytest.raises(config.ConfigError, match="^config key 'model.bn_splits' = 2 must divide"):
        config.validate(cfg)
    with pytest.raises(config.ConfigError, match="must divide the per-rank batch"):
        world.check(cfg, 2)


def test_python_and_or_not_on_conditions_fail_loudly():
    """``a and b`` kept only ``b`` (a Cond was always true): the rule language refuses Python's
    and/or/not, naming &, | and ~."""
    from pretrain.config.conditions import key

    a, b = key("loss.symmetric"), key("moco.symmetric_keys")
    for combine in (lambda: a and b, lambda: a or b, lambda: not a):
        with pytest.raises(TypeError, match=r"use & \(and\), \| \(or\) and ~ \(not\)"):
            combine()
    both = a & b
    cfg = SimpleNamespace(loss=SimpleNamespace(symmetric=True),
                          moco=SimpleNamespace(symmetric_keys=False))  # fmt: skip
    assert both(cfg, {}) is False and (a | b)(cfg, {}) is True and (~b)(cfg, {}) is True
