"""The sync counter catches every kind of would-be CUDA host sync and counts 0 on a clean step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sync_counter import SyncCounter, classify

x = torch.randn(6)
mask = x > 0
repeats, bins = torch.tensor([1, 2]), torch.tensor([0, 2, 2])  # host data, built outside counters
targets = torch.tensor([0, 1, 2, 0])

CASES = {  # kind -> code that forces exactly one sync of that kind on CUDA
    "item": [
        lambda: x.sum().item(),
        lambda: bool(x.sum() > 0),
        lambda: int(x[0]),
        lambda: float(x[0]),
    ],
    "equal": [lambda: torch.equal(x, x)],
    "nonzero": [lambda: mask.nonzero(), lambda: torch.where(mask), lambda: torch.argwhere(mask)],
    "mask_index": [lambda: x[mask], lambda: x.clone().__setitem__(mask, 0.0)],
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
    "host_copy": [lambda: x.cpu(), lambda: x.numpy(), lambda: x.tolist()],
    "host_data": [  # a tensor from host data: a pageable host-to-device copy on CUDA
        lambda: torch.tensor([0.5, 1.5], device=x.device),
        lambda: x.new_tensor([1.0, 2.0]),
        lambda: torch.as_tensor(np.arange(3), device=x.device),
        lambda: x[[0, 2]],  # a Python-list index is built on the host
    ],
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
    original = torch.Tensor.cpu
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
    assert syncs.count == 0, syncs.report()
    assert torch.Tensor.cpu is original


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
