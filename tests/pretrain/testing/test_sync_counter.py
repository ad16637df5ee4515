"""The sync counter catches every kind of would-be CUDA host sync and counts 0 on a clean step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from negmine_core.contract.sync_counter import SyncCounter, classify

x = torch.randn(6)
mask = x > 0
repeats, bins = torch.tensor([1, 2]), torch.tensor([0, 2, 2])  # host data, built outside counters
targets = torch.tensor([0, 1, 2, 0])
idx2 = torch.arange(2)

CASES = {  # kind -> code that forces exactly one sync of that kind on CUDA
    "item": [
        lambda: x.sum().item(),
        lambda: bool(x.sum() > 0),
        lambda: int(x[0]),
        lambda: float(x[0]),
        lambda: x.masked_fill(mask, x.max()),  # masked_fill__cuda reads a device value: item()
    ],
    "equal": [lambda: torch.equal(x, x)],
    "nonzero": [lambda: mask.nonzero(), lambda: torch.where(mask), lambda: torch.argwhere(mask)],
    "mask_index": [
        lambda: x[mask],
        lambda: x.clone().__setitem__(mask, x.sum()),  # a device value: index_put_'s nonzero
    ],
    "masked_select": [lambda: torch.masked_select(x, mask)],
    "unique": [
        lambda: torch.unique(x),
        lambda: torch.unique_consecutive(x),
        lambda: torch.unique(x.view(2, 3), dim=0),
    ],
    "repeat_interleave": [
        lambda: torch.repeat_interleave(repeats),
        lambda: x[:2].repeat_interleave(repeats),
    ],
    "bincount": [lambda: torch.bincount(bins)],
    "host_copy": [
        lambda: x.cpu(),
        lambda: x.numpy(),
        lambda: x.tolist(),
        lambda: x.to("cpu"),  # a blocking copy to the host on a GPU
        lambda: x.to("cpu", torch.float64),
        lambda: x.to(device="cpu"),
    ],
    "host_data": [  # a tensor from host data: a pageable host-to-device copy on CUDA
        lambda: torch.tensor([0.5, 1.5], device=x.device),
        lambda: x.new_tensor([1.0, 2.0]),
        lambda: torch.as_tensor(np.arange(3), device=x.device),
        lambda: x[[0, 2]],  # a Python-list index is built on the host
    ],
    "host_scalar_index_put": [  # the 0-dim host value is copied to the device first (blocking)
        lambda: x.clone().__setitem__(idx2, 0.5),
        lambda: torch.zeros(2, 6, dtype=torch.bool).__setitem__((idx2, idx2), True),
        lambda: x.clone().index_put_((idx2,), torch.tensor(0.5)),
        lambda: x.clone().index_put_((mask,), torch.tensor(1.0), accumulate=True),
    ],
    "host_scalar_copy": [lambda: x.clone().__setitem__(0, 0.5)],  # a 0-dim element: copy_
}


@pytest.mark.parametrize(
    ("kind", "i"), [(k, i) for k, fns in CASES.items() for i in range(len(fns))]
)
def test_each_sync_kind_is_caught_once_with_its_stack(kind, i):
    with SyncCounter() as syncs:
        CASES[kind][i]()
    assert syncs.count == 1, syncs.report()
    assert syncs.syncs[0].kind == kind
    assert "test_sync_counter.py" in syncs.syncs[0].where()  # the line that did it


def test_sync_free_ops_count_zero_and_methods_are_restored():
    original, original_to = torch.Tensor.cpu, torch.Tensor.to
    with SyncCounter() as syncs:
        idx = torch.arange(3)
        y = torch.where(mask, x, 0.0)  # three-argument where: no sync
        y.index_select(0, idx).sum()
        x[idx]  # integer indexing
        torch.repeat_interleave(repeats, output_size=3)
        torch.repeat_interleave(x, 2)  # int repeats
        x.nonzero_static(size=6)
        torch.isfinite(x).all()  # a tensor, not a Python bool
        torch.nn.functional.cross_entropy(torch.randn(4, 3), targets)
        y = x.clone()
        y[1:3] = 0.5  # a host scalar filled (fill_ reads it on the host)
        y.view(2, 3)[0] = 0.5  # a row: fill_ too
        y[mask] = 0.5  # one bool mask and a host scalar: ATen's masked_fill_, no nonzero
        y.masked_fill_(mask, 0.5)
        y.masked_fill(mask, torch.tensor(0.5))  # a host 0-dim value: read on the host
        y[idx] = x[:3]  # a device value
        y.index_put_((idx,), x.sum())  # a device 0-dim value: no copy
        torch.where(mask, x, x.max())
        x.to(torch.float64)  # a dtype: no device
        x.to(mask)  # another tensor's device (on a GPU, the GPU)
        x.to(x.device)  # the device of a tensor (on a GPU, a no-op)
        x.to("cpu", non_blocking=True)  # asynchronous on a GPU; reading it would count
    assert syncs.count == 0, syncs.report()
    assert torch.Tensor.cpu is original and torch.Tensor.to is original_to


def test_a_known_sync_free_training_step_counts_zero():
    """A linear model's SGD step (forward, cross entropy, backward, step) has no host sync."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    data, target = torch.randn(32, 8), torch.randint(0, 4, (32,))
    for step in range(3):
        with SyncCounter() as syncs:
            loss = torch.nn.functional.cross_entropy(net(data), target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        assert syncs.count == 0, (step, syncs.report())
    with SyncCounter() as syncs:  # and the same step with a logging line counts its .item()
        loss = torch.nn.functional.cross_entropy(net(data), target)
        print(f"loss {loss.item():.3f}")
    assert syncs.kinds() == {"item": 1}


def test_one_host_copy_counts_once():
    """``t.tolist()`` is one device-to-host copy on CUDA (a CPU dispatches an item per element);
    ``t.cpu().numpy()`` is one copy too."""
    with SyncCounter() as syncs:
        torch.stack([x.sum(), x.max()]).tolist()
        x.cpu().numpy()
    assert syncs.kinds() == {"host_copy": 2}, syncs.report()


def test_uploads_count_unless_pinned_and_non_blocking_or_a_scalar():
    """A host-to-device copy of a CPU tensor waits for the device (a pageable or blocking copy);
    classified from the op's arguments, so no GPU is needed to check it."""
    aten = torch.ops.aten
    cuda = torch.device("cuda")
    upload = {"device": cuda, "non_blocking": True}
    assert classify(aten._to_copy.default, (x,), upload) == "host_copy"  # pageable memory
    assert classify(aten._to_copy.default, (x,), {"device": cuda}) == "host_copy"
    assert classify(aten._to_copy.default, (x.sum(),), upload) is None  # a 0-dim kernel argument
    assert classify(aten._to_copy.default, (x,), {"dtype": torch.float64}) is None  # on the host
    assert classify(aten._to_copy.default, (x,), {"device": torch.device("cpu")}) is None


def test_host_scalars_on_a_gpu_are_classified_from_the_devices():
    """On a GPU the host scalar is the CPU 0-dim operand of an op on the device (fake CUDA
    tensors: no GPU needed): copied first by index_put_ and copy_ unless ATen reads it on the
    host (one same-device bool mask: masked_fill_; fill_), or the copy is non-blocking."""
    aten = torch.ops.aten
    with FakeTensorMode(allow_non_fake_inputs=True):
        y = torch.empty(6, device="cuda")
        on_gpu = torch.empty(6, dtype=torch.bool, device="cuda")
        gpu_idx, gpu_scalar = torch.arange(2, device="cuda"), torch.ones((), device="cuda")
    scalar = torch.tensor(0.5)  # on the host
    assert classify(aten.index_put_.default, (y, [gpu_idx], scalar), {}) == "host_scalar_index_put"
    assert classify(aten.index_put_.default, (y, [on_gpu], scalar), {}) is None  # masked fill
    accumulate = (y, [on_gpu], scalar, True)
    assert classify(aten.index_put_.default, accumulate, {}) == "host_scalar_index_put"
    assert classify(aten.index_put_.default, (y, [mask], scalar), {}) == "host_scalar_index_put"
    assert classify(aten.index_put_.default, (y, [on_gpu], gpu_scalar), {}) == "mask_index"
    assert classify(aten.index_put_.default, (y, [gpu_idx], gpu_scalar), {}) is None
    assert classify(aten.copy_.default, (y[0], scalar), {}) == "host_scalar_copy"
    assert classify(aten.copy_.default, (y[0], scalar, True), {}) is None  # non-blocking
    assert classify(aten.fill_.Tensor, (y, scalar), {}) is None
    assert classify(aten.masked_fill_.Tensor, (y, on_gpu, scalar), {}) is None
    assert classify(aten.masked_fill_.Tensor, (y, on_gpu, gpu_scalar), {}) == "item"
    assert classify(aten.lift_fresh.default, (gpu_scalar,), {}) == "host_data"  # tensor(v, dev)
    cuda = {"device": torch.device("cuda")}
    assert classify(aten._to_copy.default, (scalar,), cuda) == "host_scalar_copy"


def test_a_host_scalar_is_one_built_in_the_block():
    """On a CPU a 0-dim tensor counts as a host scalar only if a lift_fresh of the counted block
    built it: a device-computed 0-dim value, or a constant from before, is not one."""
    before = torch.tensor(0.5)
    with SyncCounter() as syncs:
        x.clone().index_put_((idx2,), before)
        x.clone().index_put_((idx2,), x.sum())
        x.clone().index_put_((idx2,), torch.tensor(0.5))
    assert syncs.kinds() == {"host_scalar_index_put": 1}, syncs.report()
    assert "test_sync_counter.py" in syncs.syncs[0].where()
