"""The fused split-BN path (aten ops; CUDA's under torch.compile) equals the per-split path (plain
BatchNorm2d on each contiguous chunk) in float64: forward, input / weight / bias gradients, running
statistics, at 1, 2 and 8 splits, NCHW and channels_last; its op count does not grow with the
splits. The Triton path: tests/pretrain/model/test_split_bn_triton.py."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from negmine_core.contract.op_counter import OpCounter
from pretrain.model.split_bn import SplitBatchNorm, triton_interpreted, use_path

C = 5


def randomised(bn: nn.BatchNorm2d, seed: int = 0) -> nn.BatchNorm2d:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        bn.weight.copy_(torch.rand(C, generator=g) + 0.5)
        bn.bias.copy_(torch.randn(C, generator=g))
        bn.running_mean.copy_(torch.randn(C, generator=g))
        bn.running_var.copy_(torch.rand(C, generator=g) + 0.5)
    return bn.double().train()


def batch(n: int, size: int, seed: int, channels_last: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, C, size, size, generator=g, dtype=torch.float64) * 3.0 + 2.0
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return x.contiguous(memory_format=fmt)


def chunk_reference(x: torch.Tensor, g: torch.Tensor, splits: int):
    """Plain nn.BatchNorm2d on each contiguous chunk (rank r's batch): outputs and input grads
    concatenated, weight and bias grads summed, running statistics averaged."""
    outs, grads, bns = [], [], []
    for x_r, g_r in zip(x.chunk(splits), g.chunk(splits), strict=True):
        bn = randomised(nn.BatchNorm2d(C))
        x_r = x_r.detach().clone().requires_grad_()
        y = bn(x_r)
        (y * g_r).sum().backward()
        outs.append(y.detach())
        grads.append(x_r.grad)
        bns.append(bn)
    stat = {k: torch.stack([getattr(b, k) for b in bns]).mean(0)
            for k in ("running_mean", "running_var")}  # fmt: skip
    wg = torch.stack([b.weight.grad for b in bns]).sum(0)
    bg = torch.stack([b.bias.grad for b in bns]).sum(0)
    return torch.cat(outs), torch.cat(grads), wg, bg, stat


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("splits", [1, 2, 8])
@pytest.mark.parametrize("path", ["fused", "per_split"])
def test_split_bn_equals_batchnorm_per_chunk(splits, channels_last, path):
    x = batch(16, 3, seed=splits, channels_last=channels_last).requires_grad_()
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(7), dtype=x.dtype)
    bn = randomised(SplitBatchNorm(C, splits, path=path))
    y = bn(x)
    (y * g).sum().backward()
    ref, ref_grad, wg, bg, stat = chunk_reference(x, g, splits)
    tol = {"rtol": 1e-11, "atol": 1e-11}
    torch.testing.assert_close(y, ref, **tol)
    torch.testing.assert_close(x.grad, ref_grad, **tol)
    torch.testing.assert_close(bn.weight.grad, wg, **tol)
    torch.testing.assert_close(bn.bias.grad, bg, **tol)
    torch.testing.assert_close(bn.running_mean, stat["running_mean"], **tol)
    torch.testing.assert_close(bn.running_var, stat["running_var"], **tol)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    assert y.is_contiguous(memory_format=fmt) and x.grad.is_contiguous(memory_format=fmt)


def test_fused_gradients_pass_gradcheck():
    """The hand-written backward against finite differences (autograd's gradcheck), 2 splits."""
    bn = randomised(SplitBatchNorm(C, 2, path="fused"))
    x = batch(4, 2, seed=3, channels_last=False).requires_grad_()
    w = bn.weight.detach().clone().requires_grad_()
    b = bn.bias.detach().clone().requires_grad_()

    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(bn, {"weight": w, "bias": b}, (x,))

    assert torch.autograd.gradcheck(f, (x, w, b))


def test_fused_on_reduced_precision_keeps_dtype_layout_and_float32_statistics():
    """bf16 input: bf16 output and input gradient in the input's layout; statistics from float32
    accumulation (the running stats equal those of the float32 per-split path on the same
    bf16 values to float32 rounding)."""
    x32 = batch(8, 4, seed=1, channels_last=True).float()
    x = x32.bfloat16().requires_grad_()
    fused = randomised(SplitBatchNorm(C, 4, path="fused")).float()
    ref = randomised(SplitBatchNorm(C, 4, path="per_split")).float()
    y = fused(x)
    y.float().sum().backward()
    assert y.dtype == x.grad.dtype == torch.bfloat16
    assert y.is_contiguous(memory_format=torch.channels_last)
    y_ref = ref(x.detach().float())
    torch.testing.assert_close(y.float(), y_ref, rtol=1e-2, atol=2e-2)  # bf16 output rounding
    torch.testing.assert_close(fused.running_mean, ref.running_mean, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fused.running_var, ref.running_var, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", ["fused", "triton", "triton_onepass"])
def test_fused_paths_refuse_one_value_per_channel_like_batchnorm(path):
    bn = SplitBatchNorm(C, 4, path=path).train()
    with pytest.raises(ValueError, match="one value per channel"):
        bn(torch.randn(4, C, 1, 1))


def test_path_by_device_and_clear_refusals():
    bn = SplitBatchNorm(C, 2).train()
    assert bn.chosen_path(torch.zeros(1)) == "per_split"
    assert bn.chosen_path(torch.zeros(1, device="meta")) == "per_split"  # not CUDA
    with pytest.raises(ValueError, match="expected one of"):
        SplitBatchNorm(C, 2, path="cudnn")
    if not triton_interpreted():  # on CPU tensors the kernels need Triton's interpreter
        for path in ("triton", "triton_onepass"):
            with pytest.raises(ValueError, match=f"path '{path}' needs CUDA tensors"):
                SplitBatchNorm(C, 2, path=path).train()(torch.randn(4, C, 2, 2))


def test_triton_params_are_built_with_the_layer_and_follow_to_out_of_state_dict():
    """The Triton path's float64 (eps, momentum) is a non-persistent buffer: built at
    construction, moved by .to(), float64 through dtype casts, rebuilt when eps or momentum is
    set, and not in state_dict (checkpoints unchanged)."""
    bn = SplitBatchNorm(C, 2)
    want = torch.tensor([bn.eps, bn.momentum], dtype=torch.float64)
    assert torch.equal(bn.triton_params, want)
    assert "triton_params" not in bn.state_dict()
    assert set(bn.state_dict()) == set(nn.BatchNorm2d(C).state_dict())
    for cast in (torch.float16, torch.bfloat16, torch.float32):
        assert torch.equal(bn.to(cast).triton_params, want), cast  # not rounded by the cast
    bn.to("meta")
    assert bn.triton_params.device.type == "meta" and bn.triton_params.dtype == torch.float64
    bn.to_empty(device="cpu")  # uninitialised memory: rebuilt from the floats
    assert torch.equal(bn.triton_params, want)
    bn.eps, bn.momentum = 1e-3, 0.25
    assert bn.triton_params.tolist() == [1e-3, 0.25]
    bn.momentum = None  # a cumulative average: the Triton path refuses it
    assert bn.triton_params[0] == 1e-3 and bn.triton_params[1].isnan()
    fresh = SplitBatchNorm(C, 2)
    fresh.load_state_dict(SplitBatchNorm(C, 2).state_dict())  # strict: no missing key
    assert torch.equal(fresh.triton_params, want)


def test_triton_counters_are_int32_zeros_that_follow_to_out_of_state_dict():
    """The one-pass kernels' per-channel-block counters (zero between launches): int32 zeros
    built with the layer, not cast by dtype casts, zeros again after ``to_empty`` (uninitialised
    memory would make no program the last of its block), and not in state_dict."""
    bn = SplitBatchNorm(C, 2, path="triton_onepass")
    want = torch.zeros(C, dtype=torch.int32)
    assert torch.equal(bn.triton_counters, want) and "triton_counters" not in bn.state_dict()
    for cast in (torch.float16, torch.float64):
        assert torch.equal(bn.to(cast).triton_counters, want), cast
    bn.to("meta")
    assert bn.triton_counters.device.type == "meta" and bn.triton_counters.dtype == torch.int32
    bn.to_empty(device="cpu")
    assert torch.equal(bn.triton_counters, want)
    bn._apply(lambda t: torch.full_like(t, 7))  # what to_empty may leave: garbage, rebuilt
    assert torch.equal(bn.triton_counters, want)


def test_triton_counters_exist_on_the_onepass_path_only_and_follow_use_path():
    """Only path "triton_onepass" has the counters buffer: built (zeros, on the layer's device)
    when the constructor or use_path sets that path, dropped when use_path leaves it."""
    assert "triton_counters" not in dict(SplitBatchNorm(C, 2).named_buffers())
    for path in ("per_split", "fused", "triton"):
        assert not hasattr(SplitBatchNorm(C, 2, path=path), "triton_counters"), path
    bn = SplitBatchNorm(C, 2).to("meta")
    use_path(bn, "triton_onepass")
    assert bn.triton_counters.device.type == "meta" and bn.triton_counters.shape == (C,)
    bn.to_empty(device="cpu")
    assert torch.equal(bn.triton_counters, torch.zeros(C, dtype=torch.int32))
    use_path(bn, "triton")
    assert "triton_counters" not in dict(bn.named_buffers())
    use_path(bn, None)
    assert "triton_counters" not in dict(bn.named_buffers())


def test_eval_mode_is_plain_batchnorm_on_both_paths():
    x = batch(8, 3, seed=2, channels_last=False)
    plain = randomised(nn.BatchNorm2d(C)).eval()
    for path in ("fused", "per_split", "triton", "triton_onepass"):  # eval: no training path
        bn = randomised(SplitBatchNorm(C, 4, path=path)).eval()
        torch.testing.assert_close(bn(x), plain(x), rtol=0, atol=0)


def count_step(splits: int, path: str) -> int:
    bn = randomised(SplitBatchNorm(C, splits))
    use_path(bn, path)
    x = batch(16, 3, seed=0, channels_last=True).requires_grad_()
    with OpCounter() as ops:
        bn(x).sum().backward()
    return ops.count


def test_fused_op_count_does_not_grow_with_the_splits():
    fused = [count_step(s, "fused") for s in (2, 4, 8)]
    per_split = [count_step(s, "per_split") for s in (2, 4, 8)]
    assert fused[0] == fused[1] == fused[2], fused
    assert per_split[0] < per_split[1] < per_split[2], per_split  # what the fused path removes
    assert fused[2] < per_split[2] * 2 / 3, (fused, per_split)


@pytest.mark.parametrize("path", ["fused", "triton", "triton_onepass"])
def test_fused_path_compiles_and_equals_eager(path):
    """train.compile on CUDA compiles the fused path (custom autograd.Function), also where the
    Triton path is chosen (its ops are opaque to inductor): same output, gradients and running
    statistics as the eager fused path."""
    torch._dynamo.reset()
    bn = randomised(SplitBatchNorm(C, 2, path=path)).float()
    ref = randomised(SplitBatchNorm(C, 2, path="fused")).float()
    x = batch(8, 3, seed=4, channels_last=False).float().requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    y, y_ref = torch.compile(bn)(x), ref(x_ref)
    y.square().sum().backward()
    y_ref.square().sum().backward()
    tol = {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(y, y_ref, **tol)
    torch.testing.assert_close(x.grad, x_ref.grad, **tol)
    torch.testing.assert_close(bn.weight.grad, ref.weight.grad, **tol)
    torch.testing.assert_close(bn.running_var, ref.running_var, **tol)
    torch._dynamo.reset()
