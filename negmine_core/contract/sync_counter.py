"""Count the ops that would make the host wait for the GPU, on any device (also on a CPU).

    from pretrain.testing import SyncCounter
    with SyncCounter() as syncs:
        train_step(run, batch, epoch)  # pretrain.engine.step
    assert syncs.count == 0, syncs.report()

The sync equivalent of ``torch.cuda.set_sync_debug_mode("warn")``, which works only on CUDA. On CUDA
each op below blocks the host until the device queue drains; on a CPU they run as well, so a
``TorchDispatchMode`` sees them dispatched and can count them with the Python stack of each:

- ``aten._local_scalar_dense``: ``.item()``, ``bool(t)``, ``int(t)``, ``float(t)``, ``if t:``;
- ``aten.equal`` and ``aten.is_nonzero`` (a Python bool from a tensor);
- output sizes that depend on the data: ``nonzero`` (``torch.where(c)``, ``argwhere``),
  ``masked_select``, boolean-mask indexing ``x[mask]`` / ``x[mask] = v`` (``index``/``index_put_``
  with a bool index; ``v`` a device tensor: a host scalar ``v`` is a masked fill, see below),
  ``unique`` variants, ``repeat_interleave`` without ``output_size``,
  ``bincount`` (sized by the maximum);
- device-to-host copies (``_to_copy``/``copy_`` to the CPU from another device). On a CPU every
  tensor is already on the host, so ``Tensor.cpu``, ``Tensor.numpy``, ``Tensor.tolist`` and
  ``Tensor.to`` toward the CPU named by a string (``t.to("cpu")``, ``t.to(device="cpu",
  dtype=...)``), which do not dispatch when the tensor is on the CPU, are counted by wrapping
  those methods while the counter is active: in a training step any of them is a host copy on a
  GPU. One such call is one sync (``t.tolist()`` is one copy on CUDA, not one ``.item()`` per
  element as on a CPU), and ``t.cpu().numpy()`` counts once. Not counted on a CPU (seen on a GPU
  by the dispatch): ``t.to(torch.device("cpu"))``, which nothing tells from ``t.to(q.device)``
  there, ``t.to(other)`` (another tensor's device), and a non-blocking
  ``t.to("cpu", non_blocking=True)`` (an asynchronous copy into pinned memory; reading it is
  counted);
- host-to-device copies of host data. A tensor built inside the step from Python or numpy data
  (``torch.tensor(list, device=dev)``, ``x.new_tensor``, ``torch.as_tensor``/``from_numpy``, and
  indexing with a Python list ``x[:, [1, 2]]``, whose index tensor is built on the host) is
  dispatched as ``aten.lift_fresh`` on every device: kind ``host_data``. On CUDA its data is
  copied from pageable host memory, which serialises with the device (``set_sync_debug_mode``
  flags it), so it counts on the CPU as well; build such constants with tensor ops
  (``torch.arange``, ``torch.full``) or once per device, at construction or ``.to()``;
- a host scalar written into a device tensor. A 0-dim tensor from a Python number (``x[i] =
  0.5`` builds one on the host, as ``torch.tensor(0.5)`` does: one ``lift_fresh`` on a CPU) is
  free where CUDA reads it on the host: ``fill_`` (basic indexing ``x[1:3] = 0.5``, ``x2d[0] =
  0.5``), ``masked_fill``, and ``x[mask] = 0.5`` (one bool mask: ATen's ``index_put_`` turns it
  into ``masked_fill_(mask, value.item())``). It syncs where CUDA copies it to the device first
  with a blocking ``cudaMemcpy`` (``memcpy_and_sync``, which ``set_sync_debug_mode`` flags): an
  advanced-index write ``x[idx, own] = True`` / ``index_put_(..., torch.tensor(v))``
  (``_index_put_impl_``: ``value.to(self.device())``), kind ``host_scalar_index_put``, and a
  ``copy_`` into a 0-dim element ``x1d[0] = 0.5`` (``copy_to`` copies when the shapes match),
  kind ``host_scalar_copy``. On a GPU the scalar is the CPU 0-dim operand; on a CPU, where every
  tensor is on the host, it is one that a ``lift_fresh`` of this block built (tracked by
  identity). ``torch.tensor(0.5, device=dev)`` is a 0-dim copy as well, seen on a GPU (its
  ``lift_fresh`` is on the device) and missed on a CPU (nothing tells it from ``x[i] = 0.5``'s
  scalar there). A copy of a CPU tensor to another device (``_to_copy``/``copy_``) counts as
  ``host_copy`` unless it is non-blocking from pinned memory, or non-blocking and 0-dim (a
  blocking 0-dim one is ``host_scalar_copy``); on a CPU there is no such copy;
- ``masked_fill`` with a 0-dim value tensor that is not a host scalar: CUDA reads it with
  ``value.item()`` (kind ``item``); a Python number or a host scalar is free.

Part of the contract kit (:mod:`pretrain.testing`, installed with negmine): the kit counts a
plugin's syncs per step with it, and negmine's own tests import it from here
(``negmine_core/contract/sync_counter.py`` re-exports it).
"""

from __future__ import annotations

import traceback
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

ALWAYS = {  # op packet -> kind; every overload of these syncs
    aten._local_scalar_dense: "item",
    aten.is_nonzero: "item",
    aten.equal: "equal",
    aten.nonzero: "nonzero",
    aten.argwhere: "nonzero",
    aten.masked_select: "masked_select",
    aten._unique: "unique",
    aten._unique2: "unique",
    aten.unique_dim: "unique",
    aten.unique_consecutive: "unique",
    aten.unique_dim_consecutive: "unique",
    aten.bincount: "bincount",
}
INDEX_PUT = (aten.index_put, aten.index_put_, aten._index_put_impl_)
HOST_METHODS = ("cpu", "numpy", "tolist", "to")
MARK = "_sync_counter_on_host"  # set on the result of a counted .cpu()
KIT = str(Path(__file__).resolve().parent)  # the kit's own frames are never "where"
HostScalar = Callable[[Any, torch.Tensor], bool]  # (t, the tensor it meets) -> t is a host scalar


@dataclass
class Sync:
    kind: str
    op: str
    stack: list[str]  # innermost last, frames of this repository only (all frames if none)

    def where(self) -> str:
        return self.stack[-1] if self.stack else "?"


class SyncCounter(TorchDispatchMode):
    """A dispatch mode that records every would-be host sync in `syncs`."""

    def __init__(self) -> None:
        super().__init__()
        self.syncs: list[Sync] = []
        self._saved: dict[str, Any] = {}
        self._marked: list[torch.Tensor] = []  # results of a counted .cpu(), unmarked at exit
        self._inside = 0  # > 0 inside a counted host method: its own dispatches are not new syncs
        self._host_scalars: dict[int, weakref.ref] = {}  # 0-dim lift_fresh results of this block

    @property
    def count(self) -> int:
        return len(self.syncs)

    def kinds(self) -> Counter:
        return Counter(s.kind for s in self.syncs)

    def report(self) -> str:
        return "\n".join(f"{s.kind} ({s.op}) at {s.where()}" for s in self.syncs) or "no syncs"

    def reset(self) -> None:
        self.syncs.clear()

    def _record(self, kind: str, op: str) -> None:
        frames = traceback.extract_stack()[:-2]
        ours = [f for f in frames if "/torch/" not in f.filename and not f.filename.startswith(KIT)]
        # this tree's frames first; an installed plugin's (site-packages) where there are none
        mine = [f for f in ours if "site-packages" not in f.filename] or ours
        mine_text = [f"{f.filename}:{f.lineno} {f.name}" for f in mine]
        self.syncs.append(Sync(kind, op, mine_text or [f"{f.filename}:{f.lineno}" for f in frames]))

    def host_scalar(self, t: Any, on: torch.Tensor) -> bool:
        """Whether ``t`` is a 0-dim tensor on the host that a CUDA op writing ``on`` must copy to
        the device: on a GPU a CPU 0-dim; on a CPU (everything on the host) one that a
        ``lift_fresh`` of this block built from a Python number."""
        if gpu_host_scalar(t, on):
            return True
        if not isinstance(t, torch.Tensor) or t.dim() != 0 or t.device.type != "cpu":
            return False
        ref = self._host_scalars.get(id(t))
        return ref is not None and ref() is t

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        kind = None if self._inside else classify(func, args, kwargs, self.host_scalar)
        if kind:
            self._record(kind, str(func))
        out = func(*args, **kwargs)
        if func.overloadpacket is aten.lift_fresh and out.dim() == 0 and out.device.type == "cpu":
            self._host_scalars[id(out)] = weakref.ref(out)
        return out

    def __enter__(self) -> SyncCounter:
        for name in HOST_METHODS:
            original = getattr(torch.Tensor, name)
            self._saved[name] = original
            setattr(torch.Tensor, name, self._host_method(name, original))
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved.clear()
        self._host_scalars.clear()
        for t in self._marked:
            delattr(t, MARK)
        self._marked.clear()

    def _host_method(self, name: str, original: Any) -> Any:
        counter = self

        def wrapped(t: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if getattr(t, MARK, False):  # x.cpu().numpy(): one copy, counted at .cpu()
                return original(t, *args, **kwargs)
            if name == "to" and not to_host(args, kwargs):  # a dtype, or toward a device
                return original(t, *args, **kwargs)
            counter._record("host_copy", f"Tensor.{name}")
            counter._inside += 1
            try:
                out = original(t, *args, **kwargs)
            finally:
                counter._inside -= 1
            if isinstance(out, torch.Tensor):
                setattr(out, MARK, True)
                counter._marked.append(out)
            return out

        return wrapped


def to_host(args: tuple, kwargs: dict) -> bool:
    """Whether ``Tensor.to(*args, **kwargs)`` is a blocking copy to the host named as such: its
    device a string naming the CPU (``"cpu"``, positional or ``device=``) and ``non_blocking``
    not set. A ``torch.device`` is not counted: on a CPU run ``x.to(q.device)`` (a no-op on the
    device, as MoCHi's constants) and the trainer's ``x.to(run.device)`` are CPU devices too, and
    nothing tells them from ``torch.device("cpu")``; on a GPU the dispatch sees a real copy. A
    non-blocking copy to the CPU is not a sync (on a GPU it lands in pinned memory; reading it
    later is, by a counted method or ``.item()``)."""
    device = kwargs.get("device")
    if device is None and args:
        device = args[0]
    non_blocking = kwargs.get("non_blocking", len(args) > 2 and args[2])
    return isinstance(device, str) and _is_host(device) and not non_blocking


def _is_host(device: Any) -> bool:
    return device is not None and torch.device(device).type == "cpu"


def gpu_host_scalar(t: Any, on: torch.Tensor) -> bool:
    """A CPU 0-dim tensor ``t`` meeting ``on``, a tensor on a GPU (a host scalar on any run)."""
    return (
        isinstance(t, torch.Tensor)
        and t.dim() == 0
        and t.device.type == "cpu"
        and on.device.type not in ("cpu", "meta")
    )


def classify(
    func: Any, args: tuple, kwargs: dict, host_scalar: HostScalar | None = None
) -> str | None:
    """The kind of sync ``func(*args, **kwargs)`` forces on CUDA, or None. ``host_scalar(t, on)``:
    whether ``t`` is a 0-dim host tensor (:meth:`SyncCounter.host_scalar`; without it, only a
    CPU 0-dim tensor meeting a GPU tensor is one)."""
    host_scalar = host_scalar or gpu_host_scalar
    packet = func.overloadpacket
    if packet in ALWAYS:
        return ALWAYS[packet]
    if packet in INDEX_PUT:  # ATen's _index_put_impl_ (TensorAdvancedIndexing.cpp)
        return _index_put_kind(args, kwargs, host_scalar)
    if packet is aten.index:
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        if any(t is not None and t.dtype in (torch.bool, torch.uint8) for t in indices):
            return "mask_index"
    if func is aten.repeat_interleave.Tensor and kwargs.get("output_size") is None:
        return "repeat_interleave"  # the other overloads decompose into this one
    if packet is aten.lift_fresh and (args[0].dim() > 0 or args[0].device.type != "cpu"):
        return "host_data"  # on a GPU also 0-dim: torch.tensor(0.5, device=dev) copied it
    if func in (aten.masked_fill.Tensor, aten.masked_fill_.Tensor):
        value = args[2] if len(args) > 2 else kwargs["value"]
        if not (host_scalar(value, args[0]) or _cpu_value_on_gpu(value, args[0])):
            return "item"  # masked_fill__cuda: value.item() of a device tensor
    if packet is aten._to_copy:
        src, dev = args[0], kwargs.get("device")
        if _is_host(dev) and src.device.type != "cpu":
            return "host_copy"
        if dev is not None and not _is_host(dev) and _blocking_upload(src, kwargs):
            return "host_scalar_copy" if src.dim() == 0 else "host_copy"
    if packet is aten.copy_:
        dst, src = args[0], args[1]
        if dst.device.type == "cpu" and src.device.type not in ("cpu", "meta"):
            return "host_copy"
        non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
        if host_scalar(src, dst) and not non_blocking:
            return "host_scalar_copy"  # copy_kernel_cuda: memcpy_and_sync of the scalar
        if dst.device.type not in ("cpu", "meta") and _blocking_upload(
            src, {"non_blocking": non_blocking}
        ):
            return "host_copy"
    return None


def _index_put_kind(args: tuple, kwargs: dict, host_scalar: HostScalar) -> str | None:
    """``x[indices] = value`` on CUDA: a host scalar value is copied to the device first
    (``value.to(self.device())``, a blocking copy), except where ATen makes it a masked fill
    (not accumulating, one bool/uint8 mask and no other index: ``masked_fill_(mask,
    value.item())``, read on the host); a mask index otherwise syncs on its ``nonzero``."""
    self_ = args[0]
    indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
    value = args[2] if len(args) > 2 else kwargs.get("values")
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    given = [t for t in indices if t is not None]
    masks = [t for t in given if t.dtype in (torch.bool, torch.uint8)]
    host = host_scalar(value, self_) or _cpu_value_on_gpu(value, self_)
    if host and not accumulate and len(given) == 1 and len(masks) == 1:
        if masks[0].device == self_.device:
            return None  # canDispatchToMaskedFill
    if host and value.dim() == 0:
        return "host_scalar_index_put"
    if masks:
        return "mask_index"
    return None


def _cpu_value_on_gpu(value: Any, on: torch.Tensor) -> bool:
    """A one-element CPU tensor meeting a GPU tensor (ATen reads it on the host)."""
    return (
        isinstance(value, torch.Tensor)
        and value.numel() == 1
        and value.device.type == "cpu"
        and on.device.type not in ("cpu", "meta")
    )


def _blocking_upload(src: torch.Tensor, kwargs: dict) -> bool:
    """A host-to-device copy that waits for the device (``copy_kernel_cuda``'s
    ``memcpy_and_sync``): from a CPU tensor, blocking; or non-blocking from pageable memory, of
    at least one dim (counted as serialising; a non-blocking 0-dim copy is not)."""
    if src.device.type != "cpu":
        return False
    non_blocking = kwargs.get("non_blocking", False)
    if src.dim() == 0:
        return not non_blocking
    return not (non_blocking and src.is_pinned())
