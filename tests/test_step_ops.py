"""Aten ops per training step (a proxy for CUDA kernel launches) equal the documented counts of
tests/op_table.py for every recipe x strategy on the device path, and for plain MoCo on the CPU
path; docs/step_counts.md shows the same numbers."""

from __future__ import annotations

import re
from pathlib import Path

import count_ops
import op_table
import pytest

import negatives

ROOT = Path(__file__).resolve().parents[1]


def test_every_registered_strategy_has_a_documented_count():
    for recipe, counts in op_table.DEVICE_OPS.items():
        assert sorted(counts) == negatives.list_strategies(), recipe
    assert set(op_table.DEVICE_OPS) == set(count_ops.RECIPES)


@pytest.mark.parametrize("recipe", list(count_ops.RECIPES))
def test_device_path_counts_equal_the_documented_ones(recipe):
    for strategy, want in op_table.DEVICE_OPS[recipe].items():
        if strategy == "mioc":  # its Triton fit, interpreted in a fresh process (see op_table)
            got = count_ops.count_in_subprocess(recipe, strategy)
            assert abs(got - want) <= op_table.MIOC_SLACK * want, (recipe, strategy, got, want)
            continue
        got = count_ops.count(recipe, strategy, fused=True).count
        assert got == want, f"{recipe}/{strategy}: {got} ops per step, documented {want}"


@pytest.mark.parametrize("recipe", list(count_ops.RECIPES))
def test_cpu_path_counts_equal_the_documented_ones(recipe):
    ops = count_ops.count(recipe, fused=False)
    assert (ops.count, ops.matching("batch_norm")) == op_table.CPU_OPS[recipe]


def test_the_fused_split_bn_path_removes_every_batch_norm_call_of_the_cifar_recipe():
    ops = count_ops.count("cifar10_moco", fused=True)
    assert ops.matching("batch_norm") == 0 and ops.count < op_table.BEFORE["cifar10_moco"]


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
    for recipe, (n, bn) in op_table.CPU_OPS.items():
        assert re.search(rf"^\| {recipe} \| CPU \(per-split BN\) \| {n} \| {bn} \|$", section,
                         flags=re.M), recipe  # fmt: skip
