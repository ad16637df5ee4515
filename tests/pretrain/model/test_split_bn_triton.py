"""Split BN's Triton path (CUDA's default) equals BatchNorm2d on each contiguous chunk: output,
input / weight / bias gradients and running statistics in float64 (2, 3, 4 and 8 splits; NCHW,
channels_last, non-mergeable strides, a gradient in another layout; several chunks per split and
channel blocks, uneven tails), and to float32 statistics in bf16 / fp32 (so does the fused
aten path); two ``negmine`` ops
forward and two backward whatever the splits. The kernels run in Triton's interpreter, in one
fresh process (``tests/helpers/split_bn_triton_worker.py``); their sm_90 compile (what CUDA runs) is
the launch test's (``triton_launches``)."""

from __future__ import annotations

import pytest
import torch

from pretrain.model.split_bn import SplitBatchNorm
from tests.helpers import split_bn_cases
from tests.helpers import split_bn_triton_worker as worker
from tests.helpers.triton_launches import installed_ptx

pytestmark = pytest.mark.early  # among the suite's longest files: started first (tests/conftest.py)

pytest.importorskip("triton", reason="triton comes with torch's CUDA wheels; not installed")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Every case through the interpreted kernels, in one fresh process (once per session: its
    tests run on one pytest-xdist worker, tests/conftest.py)."""
    out_dir = tmp_path_factory.mktemp("split_bn_triton")
    return split_bn_cases.interpreted("split_bn_triton_worker.py", out_dir)


def per_chunk(name: str) -> tuple[torch.Tensor, ...]:
    """The float64 BatchNorm2d-per-chunk reference of case ``name`` (split_bn_cases.per_chunk)."""
    return split_bn_cases.per_chunk(name, worker.CASES[name])


FLOAT64 = [name for name, case in worker.CASES.items() if case[4] == torch.float64]


@pytest.mark.parametrize("name", FLOAT64)
def test_triton_path_equals_batchnorm_per_chunk_in_float64(results, name):
    got = results[name]
    keys = ("y", "dx", "dw", "db", "running_mean", "running_var")
    for key, want in zip(keys, per_chunk(name), strict=True):
        torch.testing.assert_close(got[key], want, rtol=1e-11, atol=1e-11, msg=key)
    layout = worker.CASES[name][3]
    channels_last = layout in ("channels_last", "grad_nchw")
    assert got["y_channels_last"] == got["dx_channels_last"] == int(channels_last)


@pytest.mark.parametrize("path", ["triton", "fused"])
@pytest.mark.parametrize("name", ["s4_bf16_cl", "s4_fp32_nchw"])
def test_reduced_precision_equals_float64_per_chunk_to_float32_statistics(results, name, path):
    """bf16 / fp32 input, both CUDA paths: output and input gradient in the input's dtype, equal
    to the float64 per-chunk reference on the same (rounded) values to that dtype's rounding;
    weight / bias gradients and running statistics to float32 accumulation (1e-5)."""
    if path == "triton":
        got = results[name]
    else:
        x, grad, state = split_bn_cases.case_input(name, worker.CASES[name])
        bn = SplitBatchNorm(split_bn_cases.C, worker.CASES[name][2], path="fused").float().train()
        bn.load_state_dict(state, strict=False)
        x = x.requires_grad_()
        y = bn(x)
        y.backward(grad)
        got = {"y": y.detach(), "dx": x.grad, "dw": bn.weight.grad, "db": bn.bias.grad}
        got |= {"running_mean": bn.running_mean, "running_var": bn.running_var}
    dtype = worker.CASES[name][4]
    assert got["y"].dtype == got["dx"].dtype == dtype
    rounding = 2e-2 if dtype == torch.bfloat16 else 1e-5
    keys = ("y", "dx", "dw", "db", "running_mean", "running_var")
    for key, want in zip(keys, per_chunk(name), strict=True):
        tol = rounding if key in ("y", "dx") else 1e-5
        torch.testing.assert_close(got[key].double(), want, rtol=tol, atol=tol, msg=key)


ACT64 = [n for n, (case, *_) in worker.ACT_CASES.items() if case[4] == torch.float64]
ACT_BF16 = [n for n in worker.ACT_CASES if n not in ACT64]


@pytest.mark.parametrize("name", ACT64)
def test_fused_relu_and_shortcut_equal_basicblock_ops_in_float64(results, name):
    """FusedBasicBlock's layers (``act``: the ReLU, and the shortcut sum of its bn2) in the Triton
    kernels: output, the gradients of x, the shortcut, weight and bias, and the running
    statistics equal relu(BatchNorm2d per chunk + z) in float64 (an independent reference)."""
    case, act, z_layout = worker.ACT_CASES[name]
    got = results[f"{name} fused"]
    want = split_bn_cases.per_chunk_act(name, case, z_layout if act == "relu+residual" else None)
    assert set(want) <= set(got)
    for key, value in want.items():
        torch.testing.assert_close(got[key], value, rtol=1e-11, atol=1e-11, msg=key)
    assert got["y_channels_last"] == int(case[3] == "channels_last")


@pytest.mark.parametrize("name", ACT_BF16)
def test_fused_relu_and_shortcut_in_bf16_equal_the_unfused_ops(results, name):
    """bf16: the fused kernels against the plain Triton layer followed by torch's ``+ z`` and
    ReLU. The output within one bf16 rounding (Triton's interpreter truncates where CUDA and
    torch round to nearest; the sum is rounded once in each, after BN's rounded output), and the
    ReLU's mask the same, so every gradient and running statistic is equal exactly; and the
    fused layer launches only the four kernels where the unfused one adds the sum, the ReLU and
    its backward."""
    got, want = results[f"{name} fused"], results[f"{name} unfused"]
    ulp = got["y"].double().abs().clamp(min=1.0) * 2.0**-7
    assert ((got["y"].double() - want["y"].double()).abs() <= ulp).all()
    for key in ("dx", "dz", "dw", "db", "running_mean", "running_var"):
        if key in want:
            assert torch.equal(got[key], want[key]), key
    extra = 3 if "dz" in want else 2  # (add,) relu, threshold_backward
    assert want["ops"] - got["ops"] == extra  # both: the four kernels (+ the leaf z's layout copy)


def test_two_launches_forward_and_two_backward_whatever_the_splits(results):
    counts = {
        (r["ops_forward"], r["ops_backward"])
        for n, r in results.items()
        if "strided" not in n and n in worker.CASES
    }
    assert counts == {(2, 2)}, counts


def test_no_host_sync_from_the_first_call(results):
    """A fresh layer's first training call (forward and backward) makes no would-be CUDA host
    sync: its float64 (eps, momentum) is built with the layer and moved by .to(), not copied to
    the device in the call (CUDA's sync-debug mode raised there on an H200 when it was)."""
    assert {n: results[n]["syncs"] for n in worker.CASES} == dict.fromkeys(worker.CASES, 0)


KERNELS = ("_stats_kernel", "_normalize_kernel", "_grad_stats_kernel", "_grad_input_kernel")


def test_kernels_compile_for_sm90(triton_launches):
    """The four kernels as CUDA runs them (bf16 input, float32 statistics), compiled for sm_90
    here without a GPU: the installed triton's compiles of the launch test (one compile per
    kernel in a session, tests/helpers/triton_launches.py)."""
    ptx = installed_ptx(triton_launches, "split bn bf16 channels_last")
    for name in KERNELS:
        assert f".entry {name}" in ptx.get(name, ""), (name, sorted(ptx))
        assert ".target sm_90" in ptx[name] and ".bf16" in ptx[name], name


@pytest.mark.cuda
@pytest.mark.parametrize(
    "dtype,channels_last,shape",
    [
        (torch.float32, False, (512, 64, 32, 32)),  # cifar10_moco's first layers
        (torch.bfloat16, True, (512, 64, 32, 32)),
        (torch.bfloat16, True, (512, 512, 4, 4)),  # its last stage: many channel blocks
        (torch.float64, True, (48, 80, 7, 9)),  # odd sizes: masked tails
    ],
)
def test_triton_kernels_on_cuda_equal_float64_per_split(dtype, channels_last, shape):
    """The compiled kernels (several chunks per split, 64-channel blocks) against the per-split
    path in float64 on the same (rounded) input, 8 splits."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(shape, device="cuda", generator=gen, dtype=torch.float64) * 3.0 + 2.0
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = x.to(dtype).contiguous(memory_format=fmt)
    grad = torch.randn(shape, device="cuda", generator=gen, dtype=torch.float64).to(dtype)
    got, ref = (SplitBatchNorm(shape[1], 8, path=p).cuda().train() for p in ("triton", "per_split"))
    got.to(torch.float64 if dtype == torch.float64 else torch.float32)
    ref.double()
    x_got, x_ref = x.clone().requires_grad_(), x.double().requires_grad_()
    y = got(x_got)
    y.backward(grad)
    y_ref = ref(x_ref)
    y_ref.backward(grad.double())
    assert y.dtype == x_got.grad.dtype == dtype and y.is_contiguous(memory_format=fmt)
    rounding = {torch.bfloat16: 2e-2, torch.float32: 1e-4, torch.float64: 1e-10}[dtype]
    stats = 1e-10 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(y.double(), y_ref, rtol=rounding, atol=rounding)
    torch.testing.assert_close(x_got.grad.double(), x_ref.grad, rtol=rounding, atol=rounding)
    pairs = [(got.weight.grad, ref.weight.grad), (got.bias.grad, ref.bias.grad)]
    pairs += [(got.running_mean, ref.running_mean), (got.running_var, ref.running_var)]
    for a, b in pairs:
        torch.testing.assert_close(a.double(), b, rtol=stats, atol=stats)


@pytest.mark.cuda
def test_fused_relu_and_shortcut_on_cuda_equal_the_unfused_ops():
    """FusedBasicBlock's bn2 compiled, as cifar10_moco runs it (its first layers' shape, bf16
    channels_last; one case, so that the GPU suite's tests part compiles three kernels more, not
    twelve): equal to the plain Triton layer followed by torch's ``+ z`` and ReLU, the output
    within one bf16 rounding (both round to nearest; the fused sum is rounded once after BN's
    rounded output, as the unfused ops do) and the gradients of x, z, weight and bias to float32
    accumulation. The ReLU-only variant (bn1) is checked in Triton's interpreter above."""
    shape = (512, 64, 32, 32)
    gen = torch.Generator(device="cuda").manual_seed(1)
    x, z, grad = (
        (torch.randn(shape, device="cuda", generator=gen) * 2 + 1)
        .to(torch.bfloat16)
        .contiguous(memory_format=torch.channels_last)
        for _ in range(3)
    )
    outs = []
    for fused in (True, False):
        bn = SplitBatchNorm(shape[1], 8, path="triton").cuda().train()
        bn.act = fused
        xi, zi = x.clone().requires_grad_(), z.clone().requires_grad_()
        y = bn(xi, zi) if fused else torch.relu(bn(xi) + zi)
        y.backward(grad)
        outs.append((y, xi.grad, zi.grad, bn.weight.grad, bn.bias.grad))
    (y, *grads), (y0, *grads0) = outs
    assert ((y.float() - y0.float()).abs() <= y0.float().abs().clamp(min=1.0) * 2.0**-7).all()
    for a, b in zip(grads, grads0, strict=True):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)
