"""Run split BN's one-pass Triton path on the cases of
``tests/pretrain/model/test_split_bn_onepass.py`` and write what it returns (not a test file: the
test runs it in a subprocess).

    TRITON_INTERPRET=1 python tests/helpers/split_bn_onepass_worker.py OUT.pt

Without a CUDA device the kernels run in Triton's interpreter on CPU tensors, which must be chosen
before triton is imported: hence a fresh process. Each case of :data:`CASES` builds its input
with :func:`tests.helpers.split_bn_cases.case_input` (the test rebuilds the same one for its
reference), runs one training forward + backward of ``SplitBatchNorm(path="triton_onepass")``
under the op counter, and stores the output, the three gradients, the running statistics, the
layer's counters, the grid, whether the ops' fake implementations match, the op counts and the
host syncs of a second module's second step (its first copies its constants to the device once).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from negmine_core.contract.op_counter import OpCounter  # noqa: E402
from negmine_core.contract.sync_counter import SyncCounter  # noqa: E402
from pretrain.model import split_bn_onepass  # noqa: E402
from pretrain.model.split_bn import SplitBatchNorm  # noqa: E402
from tests.helpers.split_bn_cases import C, case_input  # noqa: E402

# name: (batch, size, splits, layout, dtype, programs, tile, block_c): programs/tile/block_c None =
# the module's own choice (one channel block when interpreted). Sizes are small: the interpreter
# runs each tile's loop in Python (s3_uneven_cblocks: 75 values a split, 38 tiles of 2 x 4 and 2
# channel blocks, the second of 1; s2_tile16: 54 values a split, 27 tiles of 2 x 8;
# s2_programs64_*: the channels per program cut down to reach 64 programs, to 1 in NCHW and to a
# DRAM sector's 4 float64 in channels_last)
CASES = {
    "s2_nchw": (16, 3, 2, "nchw", torch.float64, None, None, None),
    "s8_nchw": (16, 3, 8, "nchw", torch.float64, None, None, None),
    "s2_cl": (16, 3, 2, "channels_last", torch.float64, None, None, None),
    "s8_cl": (16, 3, 8, "channels_last", torch.float64, None, None, None),
    "s2_tile16": (12, 3, 2, "nchw", torch.float64, None, 16, None),
    "s2_cblocks_cl": (12, 5, 2, "channels_last", torch.float64, None, 64, 2),
    "s3_uneven_cblocks": (9, 5, 3, "nchw", torch.float64, None, 8, 4),
    "s2_programs64_nchw": (8, 3, 2, "nchw", torch.float64, 64, 16, None),
    "s4_programs64_cl": (8, 3, 4, "channels_last", torch.float64, 64, 64, None),
    "s2_strided": (8, 4, 2, "strided", torch.float64, None, None, None),
    "s2_grad_other_layout": (8, 4, 2, "grad_nchw", torch.float64, None, 16, None),
    "s2_grad_expanded": (8, 4, 2, "grad_expanded", torch.float64, None, 16, None),
    "s4_bf16_cl": (16, 4, 4, "channels_last", torch.bfloat16, None, 64, None),
    "s4_fp32_nchw": (16, 4, 4, "nchw", torch.float32, None, 64, None),
}


FAKE_CASES = ("s2_nchw", "s2_cl", "s2_strided", "s4_bf16_cl")  # fake vs real ops: the layouts


def fake_equals_real(bn: SplitBatchNorm, x: torch.Tensor, grad: torch.Tensor) -> int:
    """1 if the two ops' fake implementations (what tracing runs: FakeTensorMode, torch.compile,
    export) give every output the shape, dtype and strides the real ops give, else 0."""
    ops = split_bn_onepass.ops
    state = [bn.weight, bn.bias, bn.running_mean.clone(), bn.running_var.clone()]
    state = [t.detach() for t in state] + [bn.triton_counters, bn.triton_params]
    x = x.detach()

    def both(state: list[torch.Tensor], x: torch.Tensor, grad: torch.Tensor) -> list:
        y, mean, invstd = ops.split_bn_forward(x, *state, bn.num_splits)
        return [y, mean, invstd, *ops.split_bn_backward(grad, x, mean, invstd, state[0], state[4])]

    real = both(state, x, grad)
    with FakeTensorMode() as mode:
        fake = both(
            [mode.from_tensor(t) for t in state], mode.from_tensor(x), mode.from_tensor(grad)
        )
    meta = lambda t: (tuple(t.shape), t.dtype, t.stride())  # noqa: E731
    return int([meta(t) for t in fake] == [meta(t) for t in real])


def run(name: str) -> dict[str, torch.Tensor | int]:
    _, _, splits, _, _, programs, tile, block_c = CASES[name]
    defaults = split_bn_onepass.PROGRAMS, split_bn_onepass.TILE, split_bn_onepass.BLOCK_C_MAX
    split_bn_onepass.PROGRAMS = programs or defaults[0]
    split_bn_onepass.TILE = tile or defaults[1]
    split_bn_onepass.BLOCK_C_MAX = block_c or defaults[2]
    try:
        x, grad, state = case_input(name, CASES[name])
        bn = SplitBatchNorm(C, splits, path="triton_onepass").train()
        wide = torch.float64 if x.dtype == torch.float64 else torch.float32
        bn.to(wide).load_state_dict(state, strict=False)
        x = x.requires_grad_()
        spare = SplitBatchNorm(C, splits, path="triton_onepass").train().to(wide)
        with SyncCounter() as syncs:  # its first call: (eps, momentum) were built with the layer
            spare(x).backward(grad)
        x.grad = None
        with OpCounter() as forward:
            y = bn(x)
        with OpCounter() as backward:
            y.backward(grad)
        grid = split_bn_onepass._plan(x, splits).grid
        fake = fake_equals_real(bn, x, grad) if name in FAKE_CASES else -1
    finally:
        split_bn_onepass.PROGRAMS, split_bn_onepass.TILE, split_bn_onepass.BLOCK_C_MAX = defaults
    out = {"y": y.detach(), "dx": x.grad, "dw": bn.weight.grad, "db": bn.bias.grad}
    out |= {"running_mean": bn.running_mean, "running_var": bn.running_var}
    out |= {"counters": bn.triton_counters.clone(), "grid": torch.tensor(grid), "fake": fake}
    out |= {"ops_forward": forward.count, "ops_backward": backward.count, "syncs": syncs.count}
    out |= {"y_channels_last": int(y.is_contiguous(memory_format=torch.channels_last))}
    out |= {"dx_channels_last": int(x.grad.is_contiguous(memory_format=torch.channels_last))}
    return out


if __name__ == "__main__":
    torch.save({name: run(name) for name in CASES}, sys.argv[1])
