"""The host's share of a training step (issue 60): per recipe, one steady-state step's aten ops on
the device path, its host milliseconds at tiny sizes and its Python function calls.

    python benchmarks/host_overhead.py [--quick] [--recipes LIST] [--steps N] [--warm N]
        [--optimizer LIST] [--momentum LIST] [--split-bn LIST] [--results PATH] [--no-record]

On an H200 the ``cifar10_moco`` step (batch 512) took 38.2 ms of which the GPU was busy 11.0 ms:
the step is host-bound (Python, the dispatcher, the launches). What the host does per step does
not depend on the sizes, so it is measured here on a CPU at sizes that make the compute nearly
nothing while keeping each recipe's graph: its model (ResNet-18 with the CIFAR stem and 8 BN
splits for CIFAR-10: no width knob, images of 8 x 8 px instead), batch 16 (two images per BN
split), queue 64, the recipe's loss and strategy (MiOC's OC-SVM from the first step, at the
contract kit's sizes), the precision the recipe runs at on CUDA (bf16 for CIFAR-10, fp32 for the
digits), one thread. Each run is built by the trainer's own ``loop.setup`` and stepped by
``loop.train_step``, as the contract kit's counts (:mod:`pretrain.testing.steps`).

The device path: split BN and the OC-SVM as on CUDA, their Triton kernels as ``negmine::`` ops.
On a CPU those kernels run in Triton's interpreter, which here runs each op once per input shape
(warm-up); later calls replay a clone of that output (:func:`standins`), so a launch costs what
a dispatch, a Python call and an allocation cost, not the interpreter's time. The op count does
not depend on it (a ``negmine::`` op is one op either way).

Columns (the table's header says them too):

- ops: aten ops of one steady-state training step on the device path, counted on the CPU by the
  contract kit's :class:`~negmine_core.contract.op_counter.OpCounter` (augmentation stage 2, both
  encoders, strategy, loss, backward, optimizer step, momentum update, enqueue; views and
  allocations not counted): a proxy for CUDA kernel launches;
- host ms: the wall milliseconds of one step at the tiny sizes, median of ``--steps`` steps after
  ``--warm`` warm-up steps, CPU, one thread;
- Python calls: Python function calls (``sys.setprofile`` "call" events; C functions not
  counted) during one step.

``--optimizer`` (a comma list): ``built`` (the trainer's SGD as ``pretrain/build.py``
builds it), ``loop`` (``foreach=False``: a loop over the parameters), ``foreach``
(``foreach=True``) or ``fused`` (``fused=True``); the benchmark sets the optimizer's groups itself,
the trainer's code is unchanged. ``--momentum`` (a comma list): ``built`` (the model's
``MoCo.momentum_update``: one ``_foreach_lerp_`` over the parameter lists) or ``loop`` (moco's
builder at b8ae0d9: ``param_k.data = param_k.data * m + param_q.data * (1 - m)`` per parameter),
to measure what the multi-tensor update saves. ``--split-bn`` (a comma list): ``triton`` (CUDA's
default, four kernels per layer) or ``triton_onepass`` (``model.split_bn=triton_onepass``, one
launch per layer each way); a row of the latter names it beside the recipe. Targets (issue 60):
``cifar10_moco`` at 400 ops or fewer, and its host ms halved against the baseline row recorded
in benchmarks/RESULTS.md (commit 0e99693).

``--quick`` (CI, < 60 s on 2 cores): 2 warm-up and 3 timed steps per recipe.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

# Triton's interpreter runs the device path's kernels on a CPU; it must be on before triton loads
os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results_md import record_table  # noqa: E402
from negmine_core.contract.op_counter import OpCounter  # noqa: E402
from negmine_core.step import Batch  # noqa: E402
from pretrain.testing import steps  # noqa: E402  (the contract kit's runs: one way to count)

RECIPES = ("digits_moco", "digits_mioc", "cifar10_moco", "cifar10_moco_sym", "cifar10_mioc")
OPTIMIZERS = {"built": None, "loop": {"foreach": False}, "foreach": {"foreach": True},
              "fused": {"fused": True, "foreach": False}}  # fmt: skip
MOMENTUM = ("built", "loop")
#: split BN's device paths: CUDA's default (four Triton kernels per layer), and the opt-in one-pass
#: kernels (one launch per layer each way)
SPLIT_BN = ("triton", "triton_onepass")
EPOCH = steps.EPOCH  # past every warm-up
TARGET_OPS = {"cifar10_moco": 400}  # issue 60: 618 at 0e99693, 459 after the colour matrices
BASELINE = "0e99693"  # the commit whose figures are this table's baseline row in RESULTS.md
HEADER = [
    "ops: aten ops of one steady-state training step on the device path (split BN and the "
    "OC-SVM as their Triton ops), counted on a CPU by pretrain.testing.OpCounter: augmentation "
    "stage 2, both encoders, strategy, loss, backward, optimizer step, momentum update, enqueue. "
    "host ms: wall milliseconds of one step at tiny sizes (8 px CIFAR images / the digits' "
    "16 px, batch 16, queue 64, the recipe's model), median of the timed steps after warm-up, "
    "CPU, one thread, the Triton ops replayed from a cache. Python calls: Python function calls "
    "during one step (sys.setprofile 'call' events). Targets (issue 60): cifar10_moco 400 ops "
    f"or fewer; host ms halved against the baseline (commit {BASELINE}).",
    "",
    "| recipe | optimizer | momentum update | ops | host ms | Python calls | target |",
    "|---|---|---|---|---|---|---|",
]


def fail(msg: str) -> None:
    print(f"host_overhead: {msg}", file=sys.stderr)
    raise SystemExit(2)


@cache
def cifar_root() -> str:
    from pretrain.testing.fakedata import write_cifar10

    root = tempfile.mkdtemp(prefix="negmine_host_")
    write_cifar10(Path(root), per_batch=16, test=16)
    return root


def overrides(recipe: str) -> list[str]:
    """The tiny sizes of ``recipe`` (the module docstring): its graph at nearly no compute."""
    out = [*steps.OP_SIZES, "train.channels_last=true"]
    if recipe.startswith("cifar10"):
        out += ["train.amp=bf16", "data.image_size=8", "data.eval_resize=8",
                f"data.root={cifar_root()}"]  # fmt: skip
    if recipe.endswith("_mioc"):
        out += steps.strategy_overrides("mioc")  # the contract's sizes, no warm-up
    return out


@cache
def standins() -> list[Any]:
    """Register a CPU kernel for each ``negmine::`` Triton op that runs the op's own function
    (Triton's interpreter) once per input signature and then returns clones of that output: the
    device path's dispatch at the cost of an allocation. Returns the libraries (kept alive)."""
    from negatives.ocsvm import kernels_triton, smo_triton
    from pretrain.model import split_bn_onepass, split_bn_triton

    functions = {name: fn for name, (_, fn) in split_bn_triton.SCHEMAS.items()}
    functions |= {name: fn for name, (_, fn) in split_bn_onepass.SCHEMAS.items()}
    functions |= {"ocsvm_gram": kernels_triton._gram, "ocsvm_rbf_score": kernels_triton._score,
                  "ocsvm_smo": smo_triton._solve}  # fmt: skip  # noqa: SLF001
    lib = torch.library.Library("negmine", "IMPL")
    for name, fn in functions.items():
        lib.impl(name, replayed(fn), "CPU")
    return [lib]


def replayed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` once per signature (shapes, dtypes, strides, plain arguments), then its output's
    clones."""
    seen: dict[tuple, Any] = {}

    def key(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            return (tuple(a.shape), a.dtype, a.stride())
        return a

    def run(*args: Any) -> Any:
        k = tuple(map(key, args))
        if k not in seen:
            seen[k] = fn(*args)
        out = seen[k]
        return tuple(o.clone() for o in out) if isinstance(out, tuple) else out.clone()

    return run


class Recipe:
    """One recipe's run on the device path, with one batch from its loader, ready to step."""

    def __init__(
        self, recipe: str, optimizer: str, momentum: str = "built", split_bn: str = "triton"
    ) -> None:
        from pretrain.engine import loop
        from pretrain.model.split_bn import use_path

        standins()
        self.loop = loop
        self.run = steps.setup(recipe, overrides(recipe))
        use_path(self.run.moco, split_bn)
        steps.ready(self.run)
        settings = OPTIMIZERS[optimizer]
        for group in self.run.optimizer.param_groups if settings else ():
            group.update(settings)
        if momentum == "loop":  # an instance attribute: MoCo.keys calls it
            self.run.moco.momentum_update = looped_update(self.run.moco)
        x1, x2, y, _, *rows = next(iter(self.run.data.train_loader))
        self.tensors = (x1, x2, y, rows)

    def step(self) -> None:
        x1, x2, y, rows = self.tensors
        self.loop.set_lr(self.run, EPOCH)
        self.loop.train_step(self.run, Batch.make(x1, x2, y, rows), EPOCH)

    def close(self) -> None:
        self.run.log.close()


def looped_update(moco: Any) -> Callable[[], None]:
    """moco's builder (facebookresearch/moco b8ae0d9, ``_momentum_update_key_encoder``): the key
    encoder's parameters updated one at a time, θ_k ← m·θ_k + (1−m)·θ_q."""
    pairs = list(zip(moco.encoder_q.parameters(), moco.encoder_k.parameters(), strict=True))

    @torch.no_grad()
    def update(m: float | None = None) -> None:
        m = moco.momentum if m is None else m
        for param_q, param_k in pairs:
            param_k.data = param_k.data * m + param_q.data * (1.0 - m)

    return update


def python_calls(fn: Callable[[], None]) -> int:
    """Python function calls (``sys.setprofile`` "call" events) during ``fn()``."""
    calls = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls - 1  # the profiler sees fn's own call


def measure(
    recipe: str,
    optimizer: str,
    warm: int,
    timed: int,
    momentum: str = "built",
    split_bn: str = "triton",
) -> dict[str, Any]:
    """``{"ops", "host_ms", "calls", "top"}`` of one recipe's step (the module docstring)."""
    r = Recipe(recipe, optimizer, momentum, split_bn)
    try:
        for _ in range(warm):
            r.step()
        times = []
        for _ in range(timed):
            tic = time.perf_counter()
            r.step()
            times.append(1e3 * (time.perf_counter() - tic))
        with OpCounter() as ops:
            r.step()
        calls = python_calls(r.step)
    finally:
        r.close()
    return {"ops": ops.count, "host_ms": statistics.median(times), "calls": calls,
            "top": ops.top(5)}  # fmt: skip


def commit() -> str:
    """This checkout's commit (short), ``+changes`` where the tree differs from it."""
    try:
        git = {"cwd": ROOT, "text": True, "capture_output": True, "timeout": 10}
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], **git).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "-uno"], **git).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "commit unknown"
    return f"commit {head or 'unknown'}{' +changes' if dirty else ''}"


def target(recipe: str, ops: int) -> str:
    want = TARGET_OPS.get(recipe)
    if want is None:
        return "host ms halved"
    return f"<= {want} ops ({'met' if ops <= want else f'{ops - want} over'}); host ms halved"


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 warm-up, 3 timed steps (CI)")
    p.add_argument("--recipes", default=",".join(RECIPES), help="comma list of recipes")
    p.add_argument("--optimizer", default="built", help=f"comma list of {', '.join(OPTIMIZERS)}")
    p.add_argument("--momentum", default="built", help="comma list of built, loop")
    paths = ", ".join(SPLIT_BN)
    p.add_argument("--split-bn", default="triton", help=f"comma list of split BN's paths: {paths}")
    p.add_argument("--steps", type=int, default=None, help="timed steps (default 20, quick 3)")
    p.add_argument("--warm", type=int, default=None, help="warm-up steps (default 5, quick 2)")
    p.add_argument("--device", default="cpu", help="cpu only (the host's work is measured)")
    p.add_argument("--results", default=str(ROOT / "benchmarks" / "RESULTS.md"))
    p.add_argument("--no-record", action="store_true", help="print only, do not append")
    a = p.parse_args(argv)
    lists = (("recipes", "recipe", RECIPES), ("optimizer", "optimizer", OPTIMIZERS),
             ("momentum", "update", MOMENTUM), ("split_bn", "path", SPLIT_BN))  # fmt: skip
    for attr, what, known in lists:  # each a comma list of known names
        setattr(a, attr, [n for n in getattr(a, attr).split(",") if n])
        for n in getattr(a, attr):
            if n not in known:
                flag = "--" + attr.replace("_", "-")
                fail(f"{flag}: unknown {what} {n!r} (choose from {', '.join(known)})")
    if not (a.recipes and a.optimizer and a.momentum and a.split_bn):
        fail("--recipes, --optimizer, --momentum and --split-bn need at least one name each")
    if a.device != "cpu":
        fail(f"--device {a.device}: the host's work is measured on the CPU only")
    a.steps = a.steps if a.steps is not None else (3 if a.quick else 20)
    a.warm = a.warm if a.warm is not None else (2 if a.quick else 5)
    if a.steps < 1 or a.warm < 2:
        fail("--steps must be >= 1 and --warm >= 2 (the optimizer's state exists after one step)")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    os.environ["NEGMINE_DEVICE"] = "cpu"
    torch.set_num_threads(1)
    rows = list(HEADER)
    runs = [(r, o, m, s) for r in a.recipes for o in a.optimizer for m in a.momentum
            for s in a.split_bn]  # fmt: skip
    for recipe, optimizer, momentum, split_bn in runs:
        m = measure(recipe, optimizer, a.warm, a.steps, momentum, split_bn)
        label = recipe if split_bn == "triton" else f"{recipe} (split BN {split_bn})"
        cells = [label, optimizer, momentum, m["ops"], f"{m['host_ms']:.2f}", m["calls"],
                 target(recipe, m["ops"])]  # fmt: skip
        rows.append("| " + " | ".join(map(str, cells)) + " |")
        print(f"{label} ({optimizer}, {momentum}): most frequent ops {m['top']}", flush=True)
    mode = "quick" if a.quick else "full"
    title = (
        f"Host overhead per step at {commit()} ({mode}: {a.warm} warm-up, {a.steps} timed steps)"
    )
    record_table(title, rows, a.results, not a.no_record, "cpu")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
