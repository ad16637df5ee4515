"""The encoders' host-side savings change no value: FusedBasicBlock (split BN does BasicBlock's
ReLUs and shortcut sum) against torchvision's own BasicBlock ResNet, and the key encoder's
weights cast once per forward under autocast against autocast's per-layer casts."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchvision import models

from negmine_core.contract.op_counter import OpCounter
from pretrain.model.encoders import FusedBasicBlock, backbone, build
from pretrain.model.split_bn import SplitBatchNorm, use_path


def torchvision_resnet18(bn_splits: int) -> nn.Module:
    """The reference: torchvision's resnet18 (BasicBlock) with split BN, the CIFAR stem of
    pretrain.model.encoders.backbone and no classifier."""
    net = models.resnet18(weights=None, norm_layer=lambda c: SplitBatchNorm(c, bn_splits))
    net.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    net.maxpool, net.fc = nn.Identity(), nn.Identity()
    return net


def step(net: nn.Module, x: torch.Tensor, amp: bool) -> dict[str, torch.Tensor]:
    """Output, every gradient and every buffer after one training forward and backward."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        y = net(x)
    (y.float() * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
    out = {"y": y.detach()} | {f"grad {k}": p.grad for k, p in net.named_parameters()}
    return out | {f"buffer {k}": b for k, b in net.named_buffers()}


@pytest.mark.parametrize("path", ["per_split", "fused"])
@pytest.mark.parametrize("amp", [False, True])
def test_fused_blocks_equal_torchvisions_basicblock_resnet(path, amp):
    """Same state-dict keys, the same initial values from the same seed, and (on the CPU's and
    the aten fused split BN paths, fp32 and bf16 autocast, channels_last) the same output,
    gradients and running statistics bit for bit."""
    torch.manual_seed(0)
    ours = backbone("resnet18", cifar_stem=True, bn_splits=4)
    torch.manual_seed(0)
    ref = torchvision_resnet18(4)
    assert sum(isinstance(m, FusedBasicBlock) for m in ours.modules()) == 8
    a, b = ours.state_dict(), ref.state_dict()
    assert list(a) == list(b)
    assert all(torch.equal(a[k], b[k]) for k in a)
    for net in (ours, ref):
        use_path(net, path)
        net.to(memory_format=torch.channels_last)
    x = torch.randn(8, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    got, want = step(ours, x, amp), step(ref, x, amp)
    assert got.keys() == want.keys()
    for key in want:
        assert torch.equal(got[key], want[key]), key


def test_fused_blocks_only_with_split_bn():
    """Plain BatchNorm2d (one split) keeps torchvision's BasicBlock and the stem's ReLU."""
    net = backbone("resnet18", cifar_stem=True, bn_splits=1)
    assert not any(isinstance(m, FusedBasicBlock) for m in net.modules())
    assert isinstance(net.relu, nn.ReLU)
    split = backbone("resnet18", cifar_stem=True, bn_splits=2)
    assert isinstance(split.relu, nn.Identity) and split.bn1.act


def test_a_residual_without_the_relu_is_refused():
    bn = SplitBatchNorm(4, 2)
    with pytest.raises(ValueError, match="only with its ReLU"):
        bn(torch.randn(4, 4, 3, 3), torch.randn(4, 4, 3, 3))


def tiny(bn_splits: int = 4) -> nn.Module:
    torch.manual_seed(0)
    return build(arch="resnet_small", width=8, cifar_stem=True, dim=16, mlp=True,
                 bn_splits=bn_splits)  # fmt: skip


def keys(model: nn.Module, x: torch.Tensor, seed: int) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.manual_seed(seed)  # shuffle-BN's permutation
        return model.keys(x)


def test_keys_with_the_weights_cast_once_equal_autocasts_casts_bit_for_bit():
    """Under bf16 autocast, three steps (momentum update, keys, the query encoder changed in
    between, a state dict loaded) give the same keys and state as autocast casting each layer's
    weight itself (``cast_keys = False``); the cast copy stays out of the module's state."""
    cast, plain = tiny(), tiny()
    plain.cast_keys = False
    x = torch.randn(8, 3, 8, 8)
    for i in range(3):
        assert torch.equal(keys(cast, x, i), keys(plain, x, i)), i
        with torch.no_grad():
            for p in cast.encoder_q.parameters():
                p.add_(torch.randn_like(p), alpha=0.05)
        plain.encoder_q.load_state_dict(cast.encoder_q.state_dict())
    other = tiny()
    with torch.no_grad():
        for p in other.encoder_k.parameters():
            p.mul_(1.5)
    for m in (cast, plain):  # new key weights: the cast copy follows them
        m.load_state_dict(other.state_dict())
    assert torch.equal(keys(cast, x, 9), keys(plain, x, 9))
    a, b = cast.state_dict(), plain.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert len(list(cast.parameters())) == len(list(plain.parameters()))


def test_the_key_forward_casts_its_weights_in_one_op():
    """Autocast's per-layer weight casts (``_to_copy``: one per convolution and linear weight
    and linear bias; 22 for cifar10_moco's ResNet-18 and its head) become
    one ``_foreach_copy_``: only the input is cast."""
    counts = {}
    for cast_keys in (True, False):
        model = tiny()
        model.cast_keys = cast_keys
        x = torch.randn(8, 3, 8, 8)
        keys(model, x, 0)  # the cast copy is built at the first call
        with OpCounter() as ops:
            keys(model, x, 1)
        counts[cast_keys] = (ops.by_op["_to_copy"], ops.by_op["_foreach_copy_"])
    cast_layers = sum(isinstance(m, (nn.Conv2d, nn.Linear)) for m in tiny().encoder_k.modules())
    linear_biases = sum(isinstance(m, nn.Linear) and m.bias is not None
                        for m in tiny().encoder_k.modules())  # fmt: skip
    input_casts = counts[True][0]
    assert counts[True][1] == 1 and counts[False][1] == 0
    assert counts[False][0] - input_casts == cast_layers + linear_biases


def test_no_cast_copy_outside_autocast_or_when_turned_off():
    model = tiny()
    x = torch.randn(8, 3, 8, 8)
    assert model.key_encoder(x) is model.encoder_k  # no autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.key_encoder(x) is not model.encoder_k
        model.cast_keys = False
        assert model.key_encoder(x) is model.encoder_k
    moved = tiny()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        before = moved.key_encoder(x)
        moved.half()  # .to(): the copy is rebuilt from the new (float16) tensors
        enc = moved.key_encoder(x.half())
    assert enc is not before and moved._key_cast.src[0].dtype == torch.float16
    assert all(p.dtype == torch.bfloat16 for m in enc.modules()
               if isinstance(m, (nn.Conv2d, nn.Linear)) for p in m.parameters())  # fmt: skip


def test_a_compiled_key_encoder_is_called_as_compiled():
    """``train.compile`` (``setup.compile_encoders``) turns the cast copy off: a copy of a compiled
    module would call the original's compiled forward, and inductor fuses the casts itself."""
    from pretrain.engine.setup import compile_encoders

    model = tiny()
    compile_encoders(model, world_size=1)  # Module.compile: compiled at the first call only
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.key_encoder(torch.randn(8, 3, 8, 8)) is model.encoder_k


def test_a_float64_key_encoder_under_autocast_is_left_as_autocast_leaves_it():
    """Autocast casts no float64 tensor: a float64 model's keys under bf16 autocast are those of
    ``cast_keys = False`` (no weight becomes bf16 beside a float64 input)."""
    cast, plain = tiny().double(), tiny().double()
    plain.cast_keys = False
    x = torch.randn(8, 3, 8, 8, dtype=torch.float64)
    assert torch.equal(keys(cast, x, 0), keys(plain, x, 0))
