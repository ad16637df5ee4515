"""The inputs and the float64 reference of the split BN Triton tests, shared by both paths'
workers and tests (``split_bn_triton_worker`` / ``tests/pretrain/model/test_split_bn_triton.py``:
path "triton"; ``split_bn_onepass_worker`` / ``tests/pretrain/model/test_split_bn_onepass.py``:
path "triton_onepass"). A case is (batch, size, splits, layout, dtype, *the worker's knobs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from tests.helpers.paths import HELPERS

C = 5  # channels of every case


def case_input(
    name: str, case: tuple
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """(x, upstream gradient g, module state) of case ``name``: x from N(2, 3²) in the case's
    layout and dtype, g float64 N(0, 1) cast to it, the BN's weight/bias/running stats random."""
    n, size, _, layout, dtype, *_ = case
    g = torch.Generator().manual_seed(len(name))
    x = torch.randn(n, C, size, size, generator=g, dtype=torch.float64) * 3.0 + 2.0
    grad = torch.randn(x.shape, generator=g, dtype=torch.float64)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    if layout == "strided":  # H and W not mergeable: transposed spatial axes
        x = x.transpose(2, 3)
    if layout == "grad_nchw":  # x channels_last, its gradient NCHW
        x = x.contiguous(memory_format=torch.channels_last)
    if layout == "grad_expanded":  # the gradient of y.sum(): one value, every stride 0
        grad = torch.ones((), dtype=torch.float64).expand(x.shape)
    state = {
        "weight": torch.rand(C, generator=g, dtype=torch.float64) + 0.5,
        "bias": torch.randn(C, generator=g, dtype=torch.float64),
        "running_mean": torch.randn(C, generator=g, dtype=torch.float64),
        "running_var": torch.rand(C, generator=g, dtype=torch.float64) + 0.5,
    }
    return x.to(dtype), grad.to(dtype), state


def residual_input(name: str, case: tuple, layout: str) -> torch.Tensor:
    """The shortcut of case ``name`` (FusedBasicBlock's bn2): N(0, 1), x's shape and dtype, in
    ``layout`` ("nchw" or "channels_last")."""
    n, size, _, _, dtype, *_ = case
    g = torch.Generator().manual_seed(len(name) + 1000)
    z = torch.randn(n, C, size, size, generator=g, dtype=torch.float64).to(dtype)
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    return z.contiguous(memory_format=fmt)


def per_chunk_act(name: str, case: tuple, residual: str | None) -> dict[str, torch.Tensor]:
    """torchvision BasicBlock's ops after its BatchNorm, in float64 on the case's (rounded)
    values: relu(BatchNorm2d per chunk (x) [+ z]), z from :func:`residual_input` in layout
    ``residual`` (None: no shortcut). Output and the gradients of x, z, weight and bias, the
    running statistics."""
    x, grad, state = case_input(name, case)
    z = None if residual is None else residual_input(name, case, residual).double()
    x = x.double().requires_grad_()
    z = None if z is None else z.requires_grad_()
    w, b = (state[k].clone().requires_grad_() for k in ("weight", "bias"))
    splits = case[2]
    means = [state["running_mean"].clone() for _ in range(splits)]  # each chunk's BatchNorm2d
    vars_ = [state["running_var"].clone() for _ in range(splits)]
    ys = [
        torch.nn.functional.batch_norm(x_r, means[r], vars_[r], w, b, True, 0.1, 1e-5)
        for r, x_r in enumerate(x.chunk(splits))
    ]
    y = torch.cat(ys)
    y = torch.relu(y if z is None else y + z)
    y.backward(grad.double())
    out = {"y": y.detach(), "dx": x.grad, "dw": w.grad, "db": b.grad}
    out |= {"running_mean": torch.stack(means).mean(0), "running_var": torch.stack(vars_).mean(0)}
    return out | ({} if z is None else {"dz": z.grad})


def per_chunk(name: str, case: tuple) -> tuple[torch.Tensor, ...]:
    """Plain nn.BatchNorm2d in float64 on each contiguous chunk of the case's input (rank r's
    batch), with the case's weight, bias and running statistics: output and input gradient
    concatenated, weight and bias gradients summed, running statistics averaged."""
    x, grad, state = case_input(name, case)
    splits = case[2]
    ys, dxs, bns = [], [], []
    for x_r, g_r in zip(x.double().chunk(splits), grad.double().chunk(splits), strict=True):
        bn = torch.nn.BatchNorm2d(C).double().train()
        bn.load_state_dict(state, strict=False)
        x_r = x_r.detach().clone().requires_grad_()
        y_r = bn(x_r)
        y_r.backward(g_r)
        ys.append(y_r.detach())
        dxs.append(x_r.grad)
        bns.append(bn)
    stack = lambda key: torch.stack([getattr(b, key) for b in bns])  # noqa: E731
    grads = [torch.stack([getattr(b, k).grad for b in bns]).sum(0) for k in ("weight", "bias")]
    return (
        torch.cat(ys),
        torch.cat(dxs),
        *grads,
        stack("running_mean").mean(0),
        stack("running_var").mean(0),
    )


def interpreted(worker: str, out_dir: Path) -> dict[str, dict]:
    """Every case of ``worker`` (a file under tests/helpers) through the interpreted kernels, in one
    fresh process (Triton's interpreter must be on before triton is imported): its results."""
    out = out_dir / "results.pt"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, str(HELPERS / worker), str(out)], env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return torch.load(out, weights_only=True)
