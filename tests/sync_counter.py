"""Count the ops that would make the host wait for the GPU, on any device (also on a CPU).

    from sync_counter import SyncCounter
    with SyncCounter() as syncs:
        engine.train_step(run, x1, x2, y, epoch)
    assert syncs.count == 0, syncs.report()

The sync equivalent of ``torch.cuda.set_sync_debug_mode("warn")``, which works only on CUDA. On CUDA
each op below blocks the host until the device queue drains; on a CPU they run as well, so a
``TorchDispatchMode`` sees them dispatched and can count them with the Python stack of each:

- ``aten._local_scalar_dense``: ``.item()``, ``bool(t)``, ``int(t)``, ``float(t)``, ``if t:``;
- ``aten.equal`` and ``aten.is_nonzero`` (a Python bool from a tensor);
- output sizes that depend on the data: ``nonzero`` (``torch.where(c)``, ``argwhere``),
  ``masked_select``, boolean-mask indexing ``x[mask]`` / ``x[mask] = v`` (``index``/``index_put_``
  with a bool index), ``unique`` variants, ``repeat_interleave`` without ``output_size``,
  ``bincount`` (sized by the maximum);
- device-to-host copies (``_to_copy``/``copy_`` to the CPU from another device). On a CPU every
  tensor is already on the host, so ``Tensor.cpu``, ``Tensor.numpy`` and ``Tensor.tolist`` (which
  do not dispatch when the tensor is on the CPU) are counted by wrapping those methods while the
  counter is active: in a training step any of them is a host copy on a GPU. One such call is
  one sync (``t.tolist()`` is one copy on CUDA, not one ``.item()`` per element as on a CPU), and
  ``t.cpu().numpy()`` counts once;
- host-to-device copies of host data. A tensor built inside the step from Python or numpy data
  (``torch.tensor(list, device=dev)``, ``x.new_tensor``, ``torch.as_tensor``/``from_numpy``, and
  indexing with a Python list ``x[:, [1, 2]]``, whose index tensor is built on the host) is
  dispatched as ``aten.lift_fresh`` on every device: kind ``host_data``. On CUDA its data is
  copied from pageable host memory, which serialises with the device (``set_sync_debug_mode``
  flags it), so it counts on the CPU as well; build such constants with tensor ops
  (``torch.arange``, ``torch.full``) or once per device. A 0-dim one is not counted: ``x[i] =
  0.5`` dispatches one too and fills on the device (``torch.tensor(0.5, device=dev)`` is a copy
  that goes uncounted). A copy of a CPU tensor to
  another device (``_to_copy``/``copy_``) counts as ``host_copy`` unless it is non-blocking from
  pinned memory or of a 0-dim tensor (a kernel argument); on a CPU there is no such copy.

Not a test file: importable by tests (``tests/`` is on pytest's path) and by the benchmarks
(``sys.path.insert(0, "tests")``).
"""

from __future__ import annotations

import traceback
from collections import Counter
from dataclasses import dataclass
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
HOST_METHODS = ("cpu", "numpy", "tolist")
MARK = "_sync_counter_on_host"  # set on the result of a counted .cpu()


@dataclass
class Sync:
    kind: str
    op: str
    stack: list[str]  # innermost last, frames of this repository only (all frames if none)

    def where(self) -> str:
        return self.stack[-1] if self.stack else "?"


class SyncCounter(TorchDispatchMode):
    """A dispatch mode that records every would-be host sync in :attr:`syncs`."""

    def __init__(self) -> None:
        super().__init__()
        self.syncs: list[Sync] = []
        self._saved: dict[str, Any] = {}
        self._marked: list[torch.Tensor] = []  # results of a counted .cpu(), unmarked at exit
        self._inside = 0  # > 0 inside a counted host method: its own dispatches are not new syncs

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
        mine = [
            f"{f.filename}:{f.lineno} {f.name}"
            for f in frames
            if "site-packages" not in f.filename
            and "/torch/" not in f.filename
            and f.filename != __file__
        ]
        self.syncs.append(Sync(kind, op, mine or [f"{f.filename}:{f.lineno}" for f in frames]))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        kind = None if self._inside else classify(func, args, kwargs)
        if kind:
            self._record(kind, str(func))
        return func(*args, **kwargs)

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
        for t in self._marked:
            delattr(t, MARK)
        self._marked.clear()

    def _host_method(self, name: str, original: Any) -> Any:
        counter = self

        def wrapped(t: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if getattr(t, MARK, False):  # x.cpu().numpy(): one copy, counted at .cpu()
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


def _is_host(device: Any) -> bool:
    return device is not None and torch.device(device).type == "cpu"


def classify(func: Any, args: tuple, kwargs: dict) -> str | None:
    """The kind of sync ``func(*args, **kwargs)`` forces on CUDA, or None."""
    packet = func.overloadpacket
    if packet in ALWAYS:
        return ALWAYS[packet]
    if packet in (aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_):
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        if any(t is not None and t.dtype in (torch.bool, torch.uint8) for t in indices):
            return "mask_index"
    if func is aten.repeat_interleave.Tensor and kwargs.get("output_size") is None:
        return "repeat_interleave"  # the other overloads decompose into this one
    if packet is aten.lift_fresh and args[0].dim() > 0:
        return "host_data"
    if packet is aten._to_copy:
        src, dev = args[0], kwargs.get("device")
        if _is_host(dev) and src.device.type != "cpu":
            return "host_copy"
        if dev is not None and not _is_host(dev) and _blocking_upload(src, kwargs):
            return "host_copy"
    if packet is aten.copy_:
        dst, src = args[0], args[1]
        if dst.device.type == "cpu" and src.device.type not in ("cpu", "meta"):
            return "host_copy"
        non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
        if dst.device.type not in ("cpu", "meta") and _blocking_upload(
            src, {"non_blocking": non_blocking}
        ):
            return "host_copy"
    return None


def _blocking_upload(src: torch.Tensor, kwargs: dict) -> bool:
    """A host-to-device copy that waits for the device: from a CPU tensor of at least one dim,
    blocking or from pageable memory (non-blocking from pinned memory is asynchronous)."""
    if src.device.type != "cpu" or src.dim() == 0:
        return False
    return not (kwargs.get("non_blocking", False) and src.is_pinned())
