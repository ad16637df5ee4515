"""Aten ops per training step (a proxy for CUDA kernel launches) equal the documented counts of
tests/helpers/op_table.py for every recipe x strategy on the device path, and for plain MoCo on the
CPU path; docs/step_counts.md shows the same numbers."""

from __future__ import annotations

import re

import pytest

import negatives
from pretrain import losses
from pretrain.testing.ops import budget
from tests.helpers import count_ops, op_table
from tests.helpers.paths import ROOT


def test_the_pins_are_built_ins():
    """Every pin names a registered strategy or loss; each recipe is counted."""
    for recipe, counts in op_table.DEVICE_OPS.items():
        assert set(counts) <= set(negatives.list_strategies()), recipe
    assert set(op_table.LOSS_OPS) <= set(losses.list_losses())
    assert set(op_table.DEVICE_OPS) == set(count_ops.RECIPES)


# cifar10_moco's case (160 s on 2 cores) needs --runslow: the digits case pins the
# same ops per step of every strategy on the device path in the default suite
@pytest.mark.early
@pytest.mark.parametrize(
    "recipe",
    [pytest.param(r, marks=pytest.mark.slow) if r == "cifar10_moco" else r
     for r in count_ops.RECIPES],
)  # fmt: skip
def test_device_path_counts_equal_the_pins_or_meet_the_bound(recipe):
    """Every registered strategy on the device path (split BN's Triton kernels, MiOC's Triton fit:
    both in Triton's interpreter, in one fresh process per recipe): a built-in equals its pin,
    any other (one's own) adds at most +15 % over plain MoCo."""
    want = op_table.DEVICE_OPS[recipe]
    got = count_ops.counts(recipe, negatives.list_strategies())
    for strategy, n in got.items():
        if strategy in want:
            assert n == want[strategy], f"{recipe}/{strategy}: {n} ops, pinned {want[strategy]}"
        else:
            cls = negatives.strategies.get(strategy)
            op_table.check_bound("strategy", strategy, cls, recipe, n, want["none"])


def test_each_loss_counts_as_pinned_or_meets_the_bound():
    """Every registered loss with strategy none on digits_moco: a built-in equals its pin, any
    other (one's own) adds at most +15 % over plain MoCo (infonce)."""
    recipe = count_ops.LOSS_RECIPE
    got = count_ops.counts(recipe, [f"loss:{name}" for name in losses.list_losses()])
    for key, n in got.items():
        name = key.removeprefix("loss:")
        if name in op_table.LOSS_OPS:
            assert n == op_table.LOSS_OPS[name], f"loss {name}: {n} ops, pinned"
        else:
            base = op_table.LOSS_OPS["infonce"]
            op_table.check_bound("loss", name, losses.registry.get(name), recipe, n, base)


@pytest.mark.parametrize("path", ["fused", "per_split"])
@pytest.mark.parametrize("recipe", list(count_ops.RECIPES))
def test_other_split_bn_paths_count_as_documented(recipe, path):
    ops = count_ops.count(recipe, path=path)
    assert (ops.count, ops.matching("batch_norm")) == op_table.PATH_OPS[path][recipe]


@pytest.mark.parametrize(
    "recipe",
    [pytest.param(r, marks=pytest.mark.slow) if r == "cifar10_moco" else r
     for r in count_ops.RECIPES],
)  # fmt: skip
def test_the_one_pass_split_bn_path_counts_as_documented(recipe):
    """``model.split_bn=triton_onepass``'s step, its kernels in Triton's interpreter (a fresh
    process where the recipe has BN splits): the pinned count, 378 for cifar10_moco."""
    got = count_ops.counts(recipe, ["none"], path="triton_onepass")["none"]
    assert got == op_table.PATH_OPS["triton_onepass"][recipe][0]


def test_the_device_path_meets_the_eager_targets_and_drops_batch_norm():
    """Plain MoCo within its recipe's target, every pinned strategy within 15 % of it, and no
    batch_norm on CUDA's split-BN paths."""
    for recipe, target in op_table.TARGETS.items():
        assert op_table.DEVICE_OPS[recipe]["none"] <= target < op_table.BEFORE[recipe], recipe
    for recipe, counts in op_table.DEVICE_OPS.items():  # what a strategy adds: its budget
        for strategy, n in counts.items():
            allowed = budget(negatives.strategies.get(strategy))
            assert n <= (1 + allowed) * counts["none"], (recipe, strategy, n)
    assert op_table.LOSS_OPS["infonce"] == op_table.DEVICE_OPS[count_ops.LOSS_RECIPE]["none"]
    # the host proxy's target (issue 60: 400 ops for cifar10_moco) on the default device path
    assert op_table.DEVICE_OPS["cifar10_moco"]["none"] <= 400
    for path in ("triton", "triton_onepass", "fused"):  # no batch_norm on the paths of CUDA
        assert op_table.PATH_OPS[path]["cifar10_moco"][1] == 0, path
    for recipe, counts in op_table.DEVICE_OPS.items():  # the device path is triton's
        assert op_table.PATH_OPS["triton"][recipe][0] == counts["none"], recipe


def test_docs_show_the_documented_counts():
    text = (ROOT / "docs" / "step_counts.md").read_text()
    section = text.split("## Aten ops per training step", 1)[1]
    rows = re.findall(r"^\| (\w+) \| (\w+) \| (\d+) \| ([+-]\d+\.\d) % \|$", section, flags=re.M)
    shown = {(r, s): int(n) for r, s, n, _ in rows}
    for recipe, counts in op_table.DEVICE_OPS.items():
        for strategy, n in counts.items():
            assert shown.get((recipe, strategy)) == n, (
                recipe,
                strategy,
                shown.get((recipe, strategy)),
            )
    for r, s, n, pct in rows:  # the added % is the table's own arithmetic
        base = op_table.DEVICE_OPS[r]["none"]
        assert pct == f"{100 * (int(n) - base) / base:+.1f}", (r, s)
    for path, name in count_ops.PATH_NAMES.items():
        for recipe, (n, bn) in op_table.PATH_OPS[path].items():
            row = rf"^\| {recipe} \| {re.escape(name)} \| {n} \| {bn} \|$"
            assert re.search(row, section, flags=re.M), (recipe, path)
