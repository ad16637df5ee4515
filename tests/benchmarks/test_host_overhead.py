"""The host's work per training step (issue 60): benchmarks/host_overhead.py's table (its ops are
the contract kit's count of the same step, counted here on their own), and the momentum update
as one multi-tensor op over parameter lists listed once (moco's per-parameter loop within fp32
rounding; listed again where new parameter objects enter the tree)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from pretrain.model import encoders
from pretrain.testing import steps
from tests.helpers.paths import ROOT
from tests.helpers.troubleshooting_quotes import assert_documented

SCRIPT = ROOT / "benchmarks" / "host_overhead.py"
HEADING = "`benchmarks/host_overhead.py`, `peers.py` and `train.py`"  # docs/troubleshooting.md
COLUMNS = ["recipe", "optimizer", "momentum update", "ops", "host ms", "Python calls", "target"]


def run_script(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NEGMINE_DEVICE": "cpu"}
    env.pop("TRITON_INTERPRET", None)  # the script sets it for itself
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip


def table(stdout: str) -> list[list[str]]:
    rows = [line for line in stdout.splitlines() if line.startswith("|")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows]


def tiny_moco(dtype: torch.dtype = torch.float32) -> encoders.MoCo:
    torch.manual_seed(0)
    m = encoders.build(arch="resnet_small", width=4, cifar_stem=True, dim=8, mlp=True, bn_splits=1)
    m = m.to(dtype)
    with torch.no_grad():
        for p in m.encoder_q.parameters():
            p.add_(torch.randn_like(p))
    return m


def moco_loop(moco: encoders.MoCo, m: float) -> None:
    """facebookresearch/moco b8ae0d9 moco/builder.py ``_momentum_update_key_encoder``."""
    with torch.no_grad():
        for param_q, param_k in zip(
            moco.encoder_q.parameters(), moco.encoder_k.parameters(), strict=True
        ):
            param_k.data = param_k.data * m + param_q.data * (1.0 - m)


def test_quick_table_counts_the_kits_ops_of_the_step(tmp_path):
    results = tmp_path / "RESULTS.md"
    out = run_script("--quick", "--recipes", "digits_moco", "--results", str(results))
    assert out.returncode == 0, out.stderr[-3000:]
    rows = table(out.stdout)
    assert rows[0] == COLUMNS and all(set(c) == {"-"} for c in rows[1])
    assert [r[0] for r in rows[2:]] == ["digits_moco"]
    recipe, optimizer, momentum, ops, host_ms, calls, target = rows[2]
    assert (optimizer, momentum) == ("built", "built")
    assert float(host_ms) > 0 and int(calls) > 0 and "halved" in target
    # the same step counted here by the contract kit, the device path and sizes of the script
    os.environ.setdefault("NEGMINE_DEVICE", "cpu")
    run = steps.setup("digits_moco", [*steps.OP_SIZES, "train.channels_last=true"])
    assert int(ops) == steps.count_ops(run).count
    assert "ops: aten ops of one steady-state training step" in out.stdout  # the definitions
    assert results.read_text().count("| digits_moco | built | built |") == 1  # recorded


@pytest.mark.parametrize("flag", ["--recipes", "--split-bn"])
def test_bad_names_exit_2_with_a_documented_message(flag):
    out = run_script(flag, "nope", "--no-record")
    assert out.returncode == 2
    message = out.stderr.strip().splitlines()[-1]
    assert "'nope'" in message and flag in message
    assert_documented(message, HEADING)


@pytest.mark.parametrize("m", [0.99, 0.9, 0.5])
def test_momentum_update_is_mocos_loop_within_fp32_rounding(m):
    ours, theirs = tiny_moco(), tiny_moco()
    for _ in range(3):
        ours.momentum_update(m)
        moco_loop(theirs, m)
    for a, b in zip(ours.encoder_k.parameters(), theirs.encoder_k.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=4e-7, atol=1e-7)  # a few ulp of fp32


def momentum_calls(moco: encoders.MoCo) -> int:
    calls = 0

    def profile(frame, event, arg):  # noqa: ANN001
        nonlocal calls
        calls += event == "call"

    sys.setprofile(profile)
    try:
        moco.momentum_update()
    finally:
        sys.setprofile(None)
    return calls


def test_momentum_update_walks_the_module_tree_once():
    moco = tiny_moco()
    first = momentum_calls(moco)  # lists the parameters: a generator call per module and tensor
    # the lists kept: momentum_update, parameter_lists and no_grad's context manager
    assert momentum_calls(moco) <= 15 < first


def check_against_the_loop(moco: encoders.MoCo) -> None:
    reference = tiny_moco().double()  # the same values (seed 0), its own parameters
    moco.momentum_update(0.5)
    moco_loop(reference, 0.5)
    for a, b in zip(moco.encoder_k.parameters(), reference.encoder_k.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_parameters_converted_into_new_objects_are_listed_again():
    moco = tiny_moco()
    moco.momentum_update(1.0)  # m = 1: nothing changes, the lists are kept from here
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        moco = moco.double()  # new Parameter objects in the tree
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)
    check_against_the_loop(moco)


def test_parameters_assigned_by_load_state_dict_are_listed_again():
    moco = tiny_moco().double()
    moco.momentum_update(1.0)
    moco.load_state_dict({k: v.clone() for k, v in moco.state_dict().items()}, assign=True)
    check_against_the_loop(moco)
