"""A loss names the run settings it takes (``Loss.from_run``), never a config key: the keys are
read in one place (``pretrain.config.run_settings``), and the contract kit refuses a name the
trainer does not fill in."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from negmine_core.contract.messages import ContractError
from pretrain import build, config, losses
from pretrain.config import run_settings
from pretrain.testing.declarations import check_declarations

LOSSES = Path(losses.__file__).parent
CONFIG_KEY = re.compile(r"^(moco|model|train|data|loss|eval|kappa|negatives)\.[a-z_]+$")


def key_strings(path: Path) -> list[str]:
    """String constants that are config keys, docstrings aside."""
    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        f"{path.name}:{node.lineno} {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docs
        and CONFIG_KEY.match(node.value)
    ]


def test_no_loss_names_a_config_key():
    found = [s for p in sorted(LOSSES.glob("*.py")) for s in key_strings(p)]
    assert not found, f"config keys named in pretrain/losses (declare from_run instead): {found}"


def test_every_built_in_loss_takes_known_run_settings():
    for name in losses.registry.names():
        cls = losses.registry.get(name)
        assert set(cls.from_run) <= set(run_settings.KEYS), name


def test_the_trainer_fills_in_the_declared_settings_from_their_keys():
    cfg = config.load(
        "digits_moco.yaml",
        ["loss.name=cider", "moco.temperature=0.3", "model.dim=16", "data.in_classes=[0,1,2]"],
    )
    values = run_settings.values(cfg, losses.registry.get("cider").from_run, 3)
    assert values == {"temperature": 0.3, "num_classes": 3, "dim": 16, "classes": [0, 1, 2]}
    loss = build.loss_fn(cfg, 3)
    assert loss.temperature == 0.3


def test_the_contract_kit_refuses_an_unknown_run_setting():
    class Odd(losses.Loss):
        name = "odd_run_setting"
        from_run = ("temperature", "queue_size")

        def forward(self, s):  # pragma: no cover - never called
            raise NotImplementedError

    with pytest.raises(ContractError, match="from_run.*queue_size"):
        check_declarations(Odd)


class Untempered(losses.Loss):
    """A loss that uses no temperature: its constructor takes none (only its own setting)."""

    batch_layout = False

    def __init__(self, *, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, s: losses.Step) -> torch.Tensor:
        return self.scale * (s.emb.q * s.emb.k).sum(1).mean()


def test_a_loss_without_a_temperature_is_registered_and_built():
    """The trainer passes a loss only the run settings its constructor takes: none is forced on
    it (``run_settings.taken``), and ``loss.kwargs`` may not invent one."""
    assert run_settings.taken(Untempered) == ()
    assert run_settings.taken(losses.registry.get("infonce")) == ("temperature",)
    with losses.registry.registered("untempered", Untempered) as name:
        cfg = config.load("digits_moco.yaml", [f"loss.name={name}", "loss.kwargs={scale: 2.0}"])
        made = build.loss_fn(cfg, 10)
        assert type(made) is Untempered and made.scale == 2.0 and made.temperature is None
        check_declarations(Untempered)
        with pytest.raises(config.ConfigError, match=r"no argument 'temperature'"):
            config.load("digits_moco.yaml", [f"loss.name={name}", "loss.kwargs={temperature: 1}"])
    cfg = config.load("digits_moco.yaml", ["moco.temperature=0.3"])
    assert build.loss_fn(cfg, 10).temperature == 0.3  # a loss that takes it gets moco's
