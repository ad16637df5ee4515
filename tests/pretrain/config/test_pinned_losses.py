"""Every shipped config gives the losses of its first three steps pinned in pinned_losses.json
(recorded by ``python tests/helpers/pinned_losses.py --write``; see that file for the shared tiny
size).

A refactor that changes no behaviour keeps them; a deliberate change re-records them and says why
in its commit. Tolerance: fp32 on one thread, CPUs with other vector units round differently."""

from __future__ import annotations

import json

import pytest
import torch

from tests.helpers.pinned_losses import PINNED, first_losses, shipped

RECORDED = json.loads(PINNED.read_text())


def test_every_shipped_config_is_pinned():
    assert sorted(RECORDED) == shipped(), "re-record: python tests/helpers/pinned_losses.py --write"


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("name", shipped())
def test_first_three_losses_are_unchanged(name, one_thread):
    got = first_losses(name)
    assert got == pytest.approx(RECORDED[name], rel=2e-4, abs=1e-5), (
        f"{name}: first losses {got} != pinned {RECORDED[name]}; if the change is deliberate, "
        "re-record with `python tests/helpers/pinned_losses.py --write` and say why in the commit"
    )
