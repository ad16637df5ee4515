"""Run split BN's Triton path on the cases of ``tests/pretrain/model/test_split_bn_triton.py`` and
write what it returns (not a test file: the test runs it in a subprocess).

    TRITON_INTERPRET=1 python tests/helpers/split_bn_triton_worker.py OUT.pt

Without a CUDA device the kernels run in Triton's interpreter on CPU tensors, which must be chosen
before triton is imported: hence a fresh process. Each case of :data:`CASES` builds its input
with :func:`tests.helpers.split_bn_cases.case_input` (the test rebuilds the same one for its
reference), runs one training forward + backward of ``SplitBatchNorm(path="triton")`` under the
op counter, and stores the output, the three gradients, the running statistics, the op counts
and the host syncs of a second module's second step (its first copies its constants to the
device once).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from negmine_core.contract.op_counter import OpCounter  # noqa: E402
from negmine_core.contract.sync_counter import SyncCounter  # noqa: E402
from pretrain.model import split_bn_triton  # noqa: E402
from pretrain.model.split_bn import SplitBatchNorm  # noqa: E402
from tests.helpers.split_bn_cases import C, case_input, residual_input  # noqa: E402

# name: (batch, size, splits, layout, dtype, chunks, tile, block_c): chunks/tile/block_c None =
# the module's own choice (one chunk, one channel block when interpreted). Sizes are small: the
# interpreter runs each tile's loop in Python (s3_chunks4_uneven: 75 values a split, 38 tiles of
# 2 x 4 in 4 chunks of 20, 20, 20, 15, and 2 channel blocks, the second of 1; s4_chunks3_tile16:
# 54 values a split, 27 tiles of 2 x 8 in 3 chunks)
CASES = {
    "s2_nchw": (16, 3, 2, "nchw", torch.float64, None, None, None),
    "s8_nchw": (16, 3, 8, "nchw", torch.float64, None, None, None),
    "s2_cl": (16, 3, 2, "channels_last", torch.float64, None, None, None),
    "s8_cl": (16, 3, 8, "channels_last", torch.float64, None, None, None),
    "s4_chunks3_tile16": (12, 3, 2, "nchw", torch.float64, 3, 16, None),
    "s2_chunks5_cblocks": (12, 5, 2, "channels_last", torch.float64, 5, 64, 2),
    "s3_chunks4_uneven": (9, 5, 3, "nchw", torch.float64, 4, 8, 4),
    "s2_strided": (8, 4, 2, "strided", torch.float64, None, None, None),
    "s2_grad_other_layout": (8, 4, 2, "grad_nchw", torch.float64, 2, 16, None),
    "s2_grad_expanded": (8, 4, 2, "grad_expanded", torch.float64, 2, 16, None),
    "s4_bf16_cl": (16, 4, 4, "channels_last", torch.bfloat16, 3, 64, None),
    "s4_fp32_nchw": (16, 4, 4, "nchw", torch.float32, 3, 64, None),
}


# FusedBasicBlock's layers (SplitBatchNorm.act): name: (case as above, "relu" or
# "relu+residual", the shortcut's layout). s3_relu_res_uneven: chunks, channel blocks and tails;
# s2_relu_res_cl_z_nchw: the shortcut in another layout than x
ACT_CASES = {
    "s2_relu_nchw": ((16, 3, 2, "nchw", torch.float64, None, None, None), "relu", None),
    "s3_relu_res_uneven": ((9, 5, 3, "nchw", torch.float64, 4, 8, 4), "relu+residual", "nchw"),
    "s2_relu_res_cl_z_nchw": (
        (16, 3, 2, "channels_last", torch.float64, 2, 16, None),
        "relu+residual",
        "nchw",
    ),
    "s4_relu_res_bf16_cl": (
        (16, 4, 4, "channels_last", torch.bfloat16, 3, 64, None),
        "relu+residual",
        "channels_last",
    ),
}


class knobs:  # noqa: N801  (a context manager named for what it sets)
    """The kernels' chunking knobs of a case, set for its run and restored after."""

    def __init__(self, case: tuple) -> None:
        self.chunks, self.tile, self.block_c = case[5:8]

    def __enter__(self) -> None:
        self.defaults = split_bn_triton.CHUNKS, split_bn_triton.TILE, split_bn_triton.BLOCK_C_MAX
        split_bn_triton.CHUNKS = self.chunks
        split_bn_triton.TILE = self.tile or self.defaults[1]
        split_bn_triton.BLOCK_C_MAX = self.block_c or self.defaults[2]

    def __exit__(self, *exc: object) -> None:
        split_bn_triton.CHUNKS, split_bn_triton.TILE, split_bn_triton.BLOCK_C_MAX = self.defaults


def run_act(name: str, fused: bool) -> dict[str, torch.Tensor | int]:
    """An :data:`ACT_CASES` case through the fused kernels (``fused``), or through the plain
    Triton layer followed by BasicBlock's own ``+ shortcut`` and ReLU."""
    case, act, z_layout = ACT_CASES[name]
    with knobs(case):
        x, grad, state = case_input(name, case)
        z = residual_input(name, case, z_layout) if act == "relu+residual" else None
        bn = SplitBatchNorm(C, case[2], path="triton").train()
        bn.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
        bn.load_state_dict(state, strict=False)
        bn.act = fused
        x = x.requires_grad_()
        z = None if z is None else z.requires_grad_()
        with OpCounter() as ops:
            if fused:
                y = bn(x, z)
            else:
                y = bn(x)
                y = torch.relu(y if z is None else y + z)
            y.backward(grad)
    out = {"y": y.detach(), "dx": x.grad, "dw": bn.weight.grad, "db": bn.bias.grad}
    out |= {"running_mean": bn.running_mean, "running_var": bn.running_var, "ops": ops.count}
    out |= {} if z is None else {"dz": z.grad}
    out |= {"y_channels_last": int(y.is_contiguous(memory_format=torch.channels_last))}
    return out


def run(name: str) -> dict[str, torch.Tensor | int]:
    _, _, splits, *_ = CASES[name]
    with knobs(CASES[name]):
        x, grad, state = case_input(name, CASES[name])
        bn = SplitBatchNorm(C, splits, path="triton").train()
        wide = torch.float64 if x.dtype == torch.float64 else torch.float32
        bn.to(wide).load_state_dict(state, strict=False)
        x = x.requires_grad_()
        spare = SplitBatchNorm(C, splits, path="triton").train().to(wide)
        with SyncCounter() as syncs:  # its first call: (eps, momentum) were built with the layer
            spare(x).backward(grad)
        x.grad = None
        with OpCounter() as forward:
            y = bn(x)
        with OpCounter() as backward:
            y.backward(grad)
    out = {"y": y.detach(), "dx": x.grad, "dw": bn.weight.grad, "db": bn.bias.grad}
    out |= {"running_mean": bn.running_mean, "running_var": bn.running_var}
    out |= {"ops_forward": forward.count, "ops_backward": backward.count, "syncs": syncs.count}
    out |= {"y_channels_last": int(y.is_contiguous(memory_format=torch.channels_last))}
    out |= {"dx_channels_last": int(x.grad.is_contiguous(memory_format=torch.channels_last))}
    return out


if __name__ == "__main__":
    out = {name: run(name) for name in CASES}
    for name, (case, *_) in ACT_CASES.items():  # the unfused ops: the bf16 cases' reference
        kinds = ("fused",) if case[4] == torch.float64 else ("fused", "unfused")
        out |= {f"{name} {kind}": run_act(name, kind == "fused") for kind in kinds}
    torch.save(out, sys.argv[1])
