"""MoCo module: momentum encoder, gradient isolation, split BatchNorm, head and stem."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pretrain.model.encoders import SplitBatchNorm, backbone, build, projection_head
from tests.helpers.moco_loss import InfoNCE

N, DIM = 8, 16


def tiny_moco(bn_splits: int = 1, momentum: float = 0.999):
    torch.manual_seed(0)
    return build(arch="resnet_small", width=8, cifar_stem=True, dim=DIM, mlp=True,
                 bn_splits=bn_splits, momentum=momentum)  # fmt: skip


def images(seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, 3, 16, 16, generator=g, dtype=dtype)


def perturb_query(model) -> None:
    g = torch.Generator().manual_seed(123)
    with torch.no_grad():
        for p in model.encoder_q.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))


def params_np(module: nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().double().numpy().copy() for k, v in module.named_parameters()}


def test_key_encoder_is_an_exact_frozen_copy_at_construction():
    model = tiny_moco()
    q_state, k_state = model.encoder_q.state_dict(), model.encoder_k.state_dict()
    assert q_state.keys() == k_state.keys()
    for name in q_state:
        assert torch.equal(q_state[name], k_state[name]), name
        assert q_state[name].data_ptr() != k_state[name].data_ptr(), name  # a copy, not shared
    assert all(not p.requires_grad for p in model.encoder_k.parameters())
    assert all(p.requires_grad for p in model.encoder_q.parameters())


@pytest.mark.parametrize("m", [0.9, 0.99, 0.5])
def test_momentum_update_matches_numpy(m):
    model = tiny_moco().double()
    perturb_query(model)
    k_old, q = params_np(model.encoder_k), params_np(model.encoder_q)
    model.momentum_update(m)
    k_new = params_np(model.encoder_k)
    for name in k_old:
        expected = m * k_old[name] + (1.0 - m) * q[name]
        np.testing.assert_allclose(k_new[name], expected, rtol=1e-12, atol=1e-14, err_msg=name)
    assert params_np(model.encoder_q).keys() == q.keys()
    for name, value in params_np(model.encoder_q).items():
        np.testing.assert_array_equal(value, q[name])  # the query encoder is untouched


def test_momentum_zero_copies_and_one_freezes():
    model = tiny_moco().double()
    perturb_query(model)
    k_old = params_np(model.encoder_k)
    model.momentum_update(1.0)
    for name, value in params_np(model.encoder_k).items():
        np.testing.assert_array_equal(value, k_old[name])
    model.momentum_update(0.0)
    q = params_np(model.encoder_q)
    for name, value in params_np(model.encoder_k).items():
        np.testing.assert_array_equal(value, q[name])


def test_momentum_update_leaves_key_bn_buffers_alone():
    model = tiny_moco()
    perturb_query(model)
    with torch.no_grad():
        for buf in model.encoder_q.buffers():
            if buf.is_floating_point():
                buf.add_(3.0)
            else:
                buf.add_(7)
    k_buffers = {k: v.clone() for k, v in model.encoder_k.named_buffers()}
    assert k_buffers  # the encoder has BN buffers at all
    model.momentum_update(0.5)
    for name, buf in model.encoder_k.named_buffers():
        assert torch.equal(buf, k_buffers[name]), name


def test_keys_apply_momentum_first_and_never_receive_gradients():
    model = tiny_moco(momentum=0.9)
    model.train()
    perturb_query(model)
    k_old, q_before = params_np(model.encoder_k), params_np(model.encoder_q)
    q = model.encoder_q(images(1))
    k = model.keys(images(2))
    queue = F.normalize(torch.randn(32, DIM), dim=1)
    InfoNCE(0.2)(q, k, queue).backward()
    # Momentum update ran inside keys() with the query weights of before the backward.
    for name, value in params_np(model.encoder_k).items():
        np.testing.assert_allclose(
            value, 0.9 * k_old[name] + 0.1 * q_before[name], rtol=1e-6, atol=1e-7, err_msg=name
        )
    assert not k.requires_grad
    for name, p in model.encoder_k.named_parameters():
        assert p.grad is None, name
        assert not p.requires_grad, name
    for name, p in model.encoder_q.named_parameters():
        assert p.grad is not None, name
    np.testing.assert_allclose(np.linalg.norm(k.double().numpy(), axis=1), np.ones(N), atol=1e-6)
    np.testing.assert_allclose(
        np.linalg.norm(q.detach().double().numpy(), axis=1), np.ones(N), atol=1e-6
    )


def test_shuffle_keys_only_with_split_bn_on_one_process():
    assert tiny_moco(1).shuffle_keys is False
    assert tiny_moco(2).shuffle_keys is True


# ------------------------------------------------------------------------------------------------
# SplitBatchNorm


def randomised_bn(bn: nn.BatchNorm2d, seed: int = 0) -> nn.BatchNorm2d:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        c = bn.num_features
        bn.weight.copy_(torch.rand(c, generator=g) + 0.5)
        bn.bias.copy_(torch.randn(c, generator=g))
        bn.running_mean.copy_(torch.randn(c, generator=g))
        bn.running_var.copy_(torch.rand(c, generator=g) + 0.5)
    return bn.double()


def np_split_bn(x, weight, bias, running_mean, running_var, splits, momentum=0.1, eps=1e-5):
    """Plain train-mode BN on each contiguous chunk of N / splits samples (rank r's batch)."""
    out = np.empty_like(x)
    means, variances = [], []
    size = x.shape[0] // splits
    for b in range(splits):
        xs = x[b * size : (b + 1) * size]
        mean = xs.mean(axis=(0, 2, 3))
        var = xs.var(axis=(0, 2, 3))
        count = xs.shape[0] * xs.shape[2] * xs.shape[3]
        out[b * size : (b + 1) * size] = (xs - mean[None, :, None, None]) / np.sqrt(
            var[None, :, None, None] + eps
        ) * weight[None, :, None, None] + bias[None, :, None, None]
        means.append((1 - momentum) * running_mean + momentum * mean)
        variances.append((1 - momentum) * running_var + momentum * var * count / (count - 1))
    return out, np.mean(means, axis=0), np.mean(variances, axis=0)


@pytest.mark.parametrize("splits", [2, 4])
def test_split_bn_train_matches_per_split_reference(splits):
    bn = randomised_bn(SplitBatchNorm(3, splits))
    bn.train()
    x = images(3, torch.float64)[:, :, :5, :5] * 2.0 + 1.0
    args = [
        t.detach().numpy().copy() for t in (bn.weight, bn.bias, bn.running_mean, bn.running_var)
    ]
    out = bn(x)
    ref, ref_mean, ref_var = np_split_bn(x.numpy(), *args, splits=splits)
    np.testing.assert_allclose(out.detach().numpy(), ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(bn.running_mean.numpy(), ref_mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(bn.running_var.numpy(), ref_var, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("splits", [2, 4])
def test_split_bn_train_equals_plain_bn_on_each_contiguous_chunk(splits):
    """Split r is x[r*N/s:(r+1)*N/s], the chunk rank r holds under DDP; running statistics are
    the mean of the per-chunk BatchNorms' (each rank's own, averaged)."""
    split = randomised_bn(SplitBatchNorm(3, splits)).train()
    x = images(4, torch.float64)[:, :, :4, :4]
    out = split(x)
    chunks = [randomised_bn(nn.BatchNorm2d(3)).train() for _ in range(splits)]
    size = N // splits
    for b, plain in enumerate(chunks):
        part = x[b * size : (b + 1) * size]
        torch.testing.assert_close(
            out[b * size : (b + 1) * size], plain(part), rtol=1e-12, atol=1e-12
        )
    for name in ("running_mean", "running_var"):
        mean = torch.stack([getattr(bn, name) for bn in chunks]).mean(0)
        torch.testing.assert_close(getattr(split, name), mean, rtol=1e-12, atol=1e-12)


def test_split_bn_gradient_equals_plain_bn_on_each_contiguous_chunk():
    """Input gradients per chunk; weight and bias gradients summed over the chunks (what the
    all-reduce of an s-rank run gives, up to DDP's division by s)."""
    x = images(9, torch.float64)[:, :, :4, :4].requires_grad_()
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    split = randomised_bn(SplitBatchNorm(3, 2)).train()
    (split(x) * g).sum().backward()
    weight_grad, bias_grad = torch.zeros(3, dtype=x.dtype), torch.zeros(3, dtype=x.dtype)
    for b in range(2):
        rows = slice(4 * b, 4 * b + 4)
        xb = x.detach()[rows].requires_grad_()
        plain = randomised_bn(nn.BatchNorm2d(3)).train()
        (plain(xb) * g[rows]).sum().backward()
        torch.testing.assert_close(x.grad[rows], xb.grad, rtol=1e-12, atol=1e-12)
        weight_grad += plain.weight.grad
        bias_grad += plain.bias.grad
    torch.testing.assert_close(split.weight.grad, weight_grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(split.bias.grad, bias_grad, rtol=1e-12, atol=1e-12)


def test_split_bn_eval_is_plain_bn():
    split = randomised_bn(SplitBatchNorm(3, 2)).eval()
    plain = randomised_bn(nn.BatchNorm2d(3)).eval()
    x = images(5, torch.float64)
    torch.testing.assert_close(split(x), plain(x), rtol=0, atol=0)


def test_split_bn_refuses_batch_not_divisible():
    bn = SplitBatchNorm(3, 3).train()
    with pytest.raises(ValueError, match="batch of 8 cannot be split into 3 BatchNorm splits"):
        bn(images(6))


def test_split_bn_accepts_channels_last_input():
    """Under CUDA the engine converts model and inputs to channels_last (train.channels_last is
    on by default), so split BN must handle that memory format."""
    bn = randomised_bn(SplitBatchNorm(3, 2)).train()
    ref_bn = randomised_bn(SplitBatchNorm(3, 2)).train()
    x = images(7, torch.float64)
    out, ref = bn(x.contiguous(memory_format=torch.channels_last)), ref_bn(x)
    assert out.is_contiguous(memory_format=torch.channels_last) and ref.is_contiguous()
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(bn.running_var, ref_bn.running_var, rtol=1e-12, atol=1e-12)


def test_shuffle_is_a_no_op_with_plain_bn_but_not_with_split_bn():
    """SEMANTICS §1: on one device plain BN is permutation-invariant, split BN is not."""
    x = images(8, torch.float64)
    # Split b holds positions 4b..4b+3: this order puts images 0, 2, 4, 6 in split 0 (was 0-3).
    perm = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7])
    unshuffle = torch.argsort(perm)

    plain = randomised_bn(nn.BatchNorm2d(3)).train()
    torch.testing.assert_close(plain(x[perm])[unshuffle], plain(x), rtol=1e-12, atol=1e-12)

    split = randomised_bn(SplitBatchNorm(3, 2)).train()
    assert not torch.allclose(split(x[perm])[unshuffle], split(x), rtol=1e-3, atol=1e-3)


# ------------------------------------------------------------------------------------------------
# Head and stem


def test_mlp_head_is_linear_relu_linear_with_bias_and_no_bn():
    head = projection_head(64, DIM, mlp=True)
    assert [type(m) for m in head] == [nn.Linear, nn.ReLU, nn.Linear]
    assert (head[0].in_features, head[0].out_features) == (64, 64)
    assert (head[2].in_features, head[2].out_features) == (64, DIM)
    assert head[0].bias is not None and head[2].bias is not None
    model = tiny_moco()
    assert not any(
        isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.encoder_q.head.modules()
    )
    assert model.encoder_q.backbone.feature_dim == 64  # width 8 * 2**3


def test_head_computes_linear_relu_linear():
    torch.manual_seed(0)
    head = projection_head(6, 4, mlp=True).double()
    x = torch.randn(5, 6, dtype=torch.float64)
    w1, b1 = head[0].weight.detach().numpy(), head[0].bias.detach().numpy()
    w2, b2 = head[2].weight.detach().numpy(), head[2].bias.detach().numpy()
    ref = np.maximum(x.numpy() @ w1.T + b1, 0.0) @ w2.T + b2
    np.testing.assert_allclose(head(x).detach().numpy(), ref, rtol=1e-12, atol=1e-12)


def test_v1_head_is_one_linear():
    head = projection_head(64, DIM, mlp=False)
    assert isinstance(head, nn.Linear)
    assert (head.in_features, head.out_features) == (64, DIM)


def test_cifar_stem_for_resnet18():
    net = backbone("resnet18", cifar_stem=True)
    assert net.conv1.kernel_size == (3, 3)
    assert net.conv1.stride == (1, 1)
    assert net.conv1.padding == (1, 1)
    assert isinstance(net.maxpool, nn.Identity)
    assert isinstance(net.fc, nn.Identity)
    assert net.feature_dim == 512
    imagenet = backbone("resnet18", cifar_stem=False)
    assert imagenet.conv1.kernel_size == (7, 7) and imagenet.conv1.stride == (2, 2)
    assert isinstance(imagenet.maxpool, nn.MaxPool2d)


def test_split_bn_is_used_throughout_the_backbone():
    net = backbone("resnet_small", 8, cifar_stem=True, bn_splits=2)
    bns = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    assert bns and all(isinstance(m, SplitBatchNorm) and m.num_splits == 2 for m in bns)


def test_unknown_arch_is_refused():
    with pytest.raises(ValueError, match="unknown arch 'resnet9'"):
        backbone("resnet9")


@pytest.mark.parametrize("arch", ["resnet_small", "resnet18"])
def test_the_arch_label_names_the_width_only_where_it_sizes_the_network(arch):
    """A benchmark table's title says "resnet18", not "resnet18 width 32": torchvision's ResNets
    ignore ``model.width``, so the label names it exactly where two widths build different nets."""
    from pretrain.model.encoders import arch_label

    def size(width: int) -> int:
        return sum(p.numel() for p in backbone(arch, width).parameters())

    sized = size(16) != size(32)
    assert ("width 32" in arch_label(arch, 32)) == sized, (arch, arch_label(arch, 32))
    assert arch_label(arch, 32).startswith(arch)
