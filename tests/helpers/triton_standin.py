"""Triton's real launch path without a GPU: a stand-in active driver (not a test file).

    from tests.helpers import triton_standin
    launches = triton_standin.activate()      # before the first launch, in a process without
    kernel[grid](...)                         # TRITON_INTERPRET
    launches[-1].name, launches[-1].grid      # what would have run on an H100 / H200

Triton's interpreter (``TRITON_INTERPRET=1``) and ``ASTSource`` compiles skip what a launch on a GPU
goes through, and three failures hid there until an H200 ran them: a kernel argument
named like a local of the generated binder, a NaN ``tl.constexpr`` global failing the per-launch
globals check, and an accumulator dtype that older tritons reject. With this driver active, a
launch takes Triton's own path end to end: ``JITFunction.run`` -> the generated argument binder
and its specialisation of each argument -> the backend's ``parse_options`` (unknown launch options
raise) -> ``triton.compile`` for ``sm_90`` (PTX and ptxas's cubin) -> the globals check -> the
shared-memory and thread limits of ``CompiledKernel._init_handles`` against an H100's properties
-> the launcher. Only the last step differs: :class:`Launcher` checks each argument against the
compiled signature (a tensor of the pointer's dtype, an integer in the integer's range) and records
the launch instead of running it ("warm-up mode"): the outputs of a launch are not computed.
CPU tensors stand in for device tensors (only their ``data_ptr`` and dtype are read).

Works with triton 3.5 through 3.8 (the launcher's call and ``load_binary``'s results have the same
shape there).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase

H100 = {  # cudaDeviceProp of an H100 SXM (sm_90); the H200 has the same per-SM limits
    "max_shared_mem": 232448,
    "max_num_regs": 65536,
    "multiprocessor_count": 132,
    "warpSize": 32,
    "sm_clock_rate": 1980000,
    "mem_clock_rate": 2619000,
    "mem_bus_width": 5120,
}
DTYPES = {
    "fp64": torch.float64, "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8,
    "u8": torch.uint8, "i1": torch.bool,
}  # fmt: skip
INT_RANGES = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1), "u32": (0, 2**32 - 1),
              "u64": (0, 2**64 - 1), "i1": (0, 1)}  # fmt: skip


@dataclass
class Launch:
    name: str
    grid: tuple[int, int, int]
    num_warps: int
    shared: int
    args: dict[str, Any] = field(repr=False)


class _Utils:
    def get_device_properties(self, device: int) -> dict[str, int]:
        return dict(H100)

    def load_binary(self, name: str, kernel: bytes, shared: int, device: int) -> tuple:
        if not kernel:
            raise RuntimeError(f"{name}: ptxas produced no cubin")
        return None, 0, 0, 0, 1024  # module, function, n_regs, n_spills, max threads per block


class Launcher:
    """Stands in for ``CudaLauncher``: checks the arguments of each launch against the compiled
    signature and records the launch (nothing runs)."""

    def __init__(self, src: Any, metadata: Any) -> None:
        self.names = list(src.fn.arg_names)
        self.signature = {
            (self.names[k] if isinstance(k, int) else k): v for k, v in src.signature.items()
        }
        self.kernel_name = src.fn.__name__
        self.metadata = metadata

    def __call__(self, grid_x: int, grid_y: int, grid_z: int, stream: Any, function: Any,
                 *rest: Any) -> None:  # fmt: skip
        values = rest[len(rest) - len(self.names) :]
        args = dict(zip(self.names, values, strict=True))
        for name, value in args.items():
            check_argument(self.kernel_name, name, self.signature.get(name, "constexpr"), value)
        grid = (grid_x, grid_y, grid_z)
        if min(grid) < 1 or grid_x >= 2**31 or max(grid_y, grid_z) >= 2**16:
            raise ValueError(f"{self.kernel_name}: grid {grid} outside CUDA's limits")
        shared = self.metadata.shared
        LAUNCHES.append(Launch(self.kernel_name, grid, self.metadata.num_warps, shared, args))


def check_argument(kernel: str, name: str, ty: str, value: Any) -> None:
    """What the C launcher would refuse or misread: a pointer that is not a tensor of its dtype,
    an integer out of its type's range."""
    where = f"{kernel}: argument {name} ({ty})"
    if ty == "constexpr":
        return
    if ty.startswith("*"):
        want = DTYPES.get(ty[1:].lstrip("k"))
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{where} got {type(value).__name__}, not a tensor")
        if want is not None and value.dtype != want:
            raise TypeError(f"{where} got a {value.dtype} tensor")
        return
    if ty in INT_RANGES:
        lo, hi = INT_RANGES[ty]
        if isinstance(value, torch.Tensor) or not lo <= int(value) <= hi:
            raise TypeError(f"{where} got {value!r}")
        return
    if ty.startswith("fp") and not isinstance(value, float):
        raise TypeError(f"{where} got {value!r}")


class StandInDriver(DriverBase):
    """An active driver that reports an sm_90 device (an H100 / H200) and launches nothing."""

    def __init__(self) -> None:
        self.utils = _Utils()
        self.launcher_cls = Launcher

    @classmethod
    def is_active(cls) -> bool:
        return True

    def map_python_to_cpp_type(self, ty: str) -> str:
        return ty

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device: int) -> None:
        pass

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_device_capability(self, device: int = 0) -> tuple[int, int]:
        return (9, 0)

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")

    def get_device_interface(self) -> Any:
        return torch.cuda

    def get_benchmarker(self) -> Any:
        raise NotImplementedError("the stand-in driver launches nothing: no benchmarks")


LAUNCHES: list[Launch] = []


def activate() -> list[Launch]:
    """Make the stand-in the active driver; returns the list that each launch is appended to."""
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        raise RuntimeError("TRITON_INTERPRET is set: the interpreter skips the launch path")
    triton.runtime.driver.set_active(StandInDriver())
    return LAUNCHES
