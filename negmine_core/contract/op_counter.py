"""Count the aten ops a piece of code dispatches: a CPU-measurable proxy for CUDA kernel launches.

    from pretrain.testing import OpCounter
    with OpCounter() as ops:
        train_step(run, batch, epoch)  # pretrain.engine.step
    print(ops.count, ops.top(10))  # ops that would launch work, and the most frequent ones

A ``TorchDispatchMode`` sees every op that reaches the backend, below autograd: the forward ops,
the backward ops autograd runs (``loss.backward()`` inside the block), the optimizer's. Each
dispatched op is one host-side dispatch (~5-20 us of CPU on CUDA) and, but for the ones below,
at least one kernel launch; a ``_foreach_*`` op over many tensors counts once, as it launches a
few multi-tensor kernels on CUDA. Not counted (they launch no kernel, only build tensor
metadata):

- views: any op whose schema returns an alias of an input (``view``, ``t``, ``select``,
  ``slice``, ``expand``, ``unsqueeze``, ``as_strided``, ``detach``, ``alias``, ...);
- ops outside ``aten`` (``profiler._record_function_*``: the optimizer's markers), except ours:
  a ``negmine::*`` op (a Triton kernel: split BN's, the OC-SVM fit's) is one launch;
- metadata and allocation: ``_unsafe_view``, ``empty*``, ``resize_``, ``set_``, ``lift_fresh``,
  ``_reshape_alias``, ``sym_*`` and ``is_same_size``.

What this does not see: ops that a CUDA kernel library runs inside one aten op (cuDNN's batch
norm is one ``cudnn_batch_norm``, on a CPU ``native_batch_norm``: both one op here), and the
device branches of our code (``x.is_cuda``): count the device path by forcing it (e.g.
``SplitBatchNorm.path``), and a Triton kernel launched outside a ``negmine`` op (none in the
step: split BN's kernels and the OC-SVM fit are such ops). Part of the contract kit
(:mod:`pretrain.testing`, installed with negmine): the kit measures a plugin's ops per step with
it; negmine's tests import it from here (``negmine_core/contract/op_counter.py`` re-exports it).
"""

from __future__ import annotations

import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

METADATA = {  # packets that allocate or describe, never compute
    aten._unsafe_view,
    aten.empty,
    aten.empty_like,
    aten.empty_strided,
    aten.new_empty,
    aten.new_empty_strided,
    aten.resize_,
    aten.set_,
    aten.lift_fresh,
    aten._reshape_alias,
    aten.is_same_size,
    aten.sym_size,
    aten.sym_stride,
    aten.sym_numel,
    aten.sym_storage_offset,
}


def launches(func: torch._ops.OpOverload) -> bool:
    """Whether ``func`` counts: an ``aten`` op that is not a view (an alias output) nor a
    metadata op, or one of our ``negmine`` ops (each launches one Triton kernel)."""
    if func.namespace == "negmine":
        return True
    if func.overloadpacket in METADATA or func.namespace != "aten":
        return False  # other namespaces: profiler.* (record_function markers), no kernel
    return not func.is_view


def site() -> str:
    """The innermost frame of this repository's packages (backward: "autograd")."""
    for f in reversed(traceback.extract_stack()):
        parts = Path(f.filename).parts
        if "site-packages" not in parts and parts[-2:-1] in (("pretrain",), ("negatives",)):
            return f"{parts[-2]}/{parts[-1]}:{f.name}"
    return "autograd / torch"


class OpCounter(TorchDispatchMode):
    """A dispatch mode that counts the ops of `launches`, per op name (``ops.by_op``)."""

    def __init__(self, sites: bool = False) -> None:
        super().__init__()
        self.by_op: Counter = Counter()
        self.skipped: Counter = Counter()  # views and metadata, for the curious
        self.by_site: Counter | None = Counter() if sites else None  # "file:function" of ours

    @property
    def count(self) -> int:
        return sum(self.by_op.values())

    def top(self, n: int = 10) -> list[tuple[str, int]]:
        return self.by_op.most_common(n)

    def matching(self, word: str) -> int:
        """Counted ops whose name contains ``word`` (e.g. ``"batch_norm"``)."""
        return sum(c for name, c in self.by_op.items() if word in name)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        name = str(func.overloadpacket).removeprefix("aten.")
        counted = launches(func)
        (self.by_op if counted else self.skipped)[name] += 1
        if counted and self.by_site is not None:
            self.by_site[site()] += 1
        return func(*args, **(kwargs or {}))

    def __enter__(self) -> OpCounter:
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
