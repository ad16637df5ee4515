"""World size, rank, gather and shuffle-BN helpers that degrade to the identity in one process.

Launchers: ``torchrun`` (or submitit's ``TorchDistributedEnvironment().export()``) set ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``; ``srun`` without torchrun sets only ``SLURM_*``
variables, which :func:`init_from_env` translates. One process (no variables) never creates a
process group.
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import sys
from typing import Any

import torch
import torch.distributed as td

from negmine_core.conventions import rank_and_world
from pretrain.errors import ConfigError

_control: tuple[object, object] | None = None  # (default group it belongs to, gloo group)
DEVICE_ENV = "NEGMINE_DEVICE"  # cpu | cuda | auto (or unset): the device this process trains on
DEVICE_CHOICES = ("auto", "cpu", "cuda")


def is_on() -> bool:
    return td.is_available() and td.is_initialized()


def world_size() -> int:
    return rank_and_world()[1]


def rank() -> int:
    return rank_and_world()[0]


def is_main() -> bool:
    return rank() == 0


def device_type() -> str:
    """``"cuda"`` or ``"cpu"``: the device this process trains on.

    ``$NEGMINE_DEVICE`` if set to ``cpu`` or ``cuda``; otherwise (unset, empty or ``auto``) CUDA
    whenever torch sees a GPU, so a run on a GPU node takes the GPU (and NCCL) by default. The test
    suite sets ``cpu`` (tests/conftest.py): its ranks share one host, and several ranks cannot
    share one GPU under NCCL."""
    want = os.environ.get(DEVICE_ENV, "").strip().lower() or "auto"
    if want not in DEVICE_CHOICES:
        raise ConfigError(
            f"{DEVICE_ENV}={os.environ[DEVICE_ENV]!r}: must be one of {', '.join(DEVICE_CHOICES)}"
        )
    if want == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if want == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{DEVICE_ENV}=cuda, but torch sees no CUDA device")
    return want


def backend(device: str) -> str:
    """The default process group's backend for ranks on ``device`` (``cpu``/``cuda``)."""
    return "nccl" if device == "cuda" else "gloo"


def init_from_env(timeout_min: float | None = None) -> torch.device:
    """Join the process group of torchrun's (or srun's) variables, if any; return the device.

    The device is :func:`device_type`'s. NCCL on CUDA, gloo on CPU; a gloo group for control
    messages (:func:`any_rank`) is created alongside, collectively, so that no rank creates it
    alone later. ``timeout_min`` (config ``train.dist_timeout_min``) bounds every collective of
    both groups, e.g. the barrier the other ranks wait in while rank 0 runs the kNN monitor
    (NCCL's default is 10 minutes).
    """
    slurm_env_to_torch()
    device = device_type()
    timeout = datetime.timedelta(minutes=timeout_min) if timeout_min else None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not is_on():
        td.init_process_group(backend(device), timeout=timeout)
    if is_on():
        _control_group(timeout)
    if device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def slurm_env_to_torch() -> None:
    """Under ``srun`` without torchrun, export RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT.

    Does nothing if ``WORLD_SIZE`` is already set (torchrun, submitit's export) or outside a
    job step: ``SLURM_STEP_NUM_TASKS`` exists only in tasks started by ``srun``, so a batch
    script that runs ``python`` itself (which sees ``SLURM_NTASKS`` of the whole allocation and
    ``SLURM_PROCID=0``) stays one process instead of waiting for ranks that never start.
    MASTER_ADDR is the first host of the step (task 0 runs there), MASTER_PORT is derived from the
    job id; both are kept if already set.
    """
    env = os.environ
    if "WORLD_SIZE" in env or "SLURM_PROCID" not in env or "SLURM_STEP_NUM_TASKS" not in env:
        return
    world = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or 1)
    env["RANK"] = env["SLURM_PROCID"]
    env["WORLD_SIZE"] = str(world)
    env["LOCAL_RANK"] = env.get("SLURM_LOCALID", "0")
    if world > 1:
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
        env.setdefault("MASTER_ADDR", first_host(nodes))
        env.setdefault("MASTER_PORT", str(port_for_job(env.get("SLURM_JOB_ID", "0"))))


def first_host(nodelist: str) -> str:
    """First host of a Slurm node list (``scontrol show hostnames``, else parsed); 127.0.0.1."""
    if not nodelist:
        return "127.0.0.1"
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
        if out:
            return out[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return parse_first_host(nodelist)


def parse_first_host(nodelist: str) -> str:
    """``"gpu[007-009,12],cpu1"`` -> ``"gpu007"`` (zero padding kept); 127.0.0.1 if empty."""
    depth, end = 0, len(nodelist)
    for i, ch in enumerate(nodelist):  # the first entry ends at a comma outside brackets
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            end = i
            break
    first = re.sub(r"\[([^\]]*)\]", lambda m: re.split(r"[,-]", m.group(1))[0], nodelist[:end])
    return first.strip() or "127.0.0.1"


def port_for_job(job_id: str) -> int:
    """A port in [10000, 30000), below Linux's ephemeral range, that depends on the job only."""
    digits = re.sub(r"\D", "", job_id) or "0"
    return 10000 + int(digits) % 20000


def barrier() -> None:
    if is_on():
        td.barrier()


def _control_group(timeout: datetime.timedelta | None = None) -> object:
    """A gloo group over all ranks for small CPU messages (the default group if it is gloo).

    Created once per default group; creating a group is collective, so every rank must get here
    at the same point (:func:`init_from_env` does it at start-up).
    """
    global _control
    world = td.group.WORLD
    if _control is None or _control[0] is not world:
        gloo = td.get_backend() == "gloo"
        _control = (world, world if gloo else td.new_group(backend="gloo", timeout=timeout))
    return _control[1]


def any_rank(flag: bool) -> bool:
    """True if ``flag`` is True on any rank (an all-reduce MAX on CPU); ``flag`` in one process.

    Runs on a gloo group, so it never waits for a CUDA stream. Every rank must call it at the
    same point, e.g. once per step to agree on stopping at a step boundary when a preemption
    signal reached only some ranks.
    """
    if not is_on():
        return bool(flag)
    t = torch.tensor([int(bool(flag))], dtype=torch.int32)
    td.all_reduce(t, op=td.ReduceOp.MAX, group=_control_group())
    return bool(t.item())


def _all_gather(x: torch.Tensor) -> torch.Tensor:
    """all_gather + cat with the same (contiguous) layout on both sides of the wire: NCCL copies
    raw memory, so a channels_last ``empty_like`` output would receive a contiguous input's
    bytes scrambled. The result has ``x``'s layout (channels_last images stay channels_last)."""
    flat = x.contiguous()
    out = [
        torch.empty_like(flat, memory_format=torch.contiguous_format) for _ in range(world_size())
    ]
    td.all_gather(out, flat)
    full = torch.cat(out)
    channels_last = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)
    if channels_last and not x.is_contiguous():
        full = full.contiguous(memory_format=torch.channels_last)
    return full


@torch.no_grad()
def gather(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` from every rank along dim 0 (no gradient); identity in one process."""
    if not is_on():
        return x
    return _all_gather(x)


class _GatherWithGrad(torch.autograd.Function):
    """all_gather whose backward sends every rank's gradient of the gathered rows back to the
    rank that owns them (all_reduce then this rank's slice: gloo has no reduce_scatter)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.n = x.shape[0]
        return _all_gather(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous()
        td.all_reduce(grad)  # sum over ranks of d(loss_r)/d(row)
        return grad[rank() * ctx.n : (rank() + 1) * ctx.n]


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` from every rank along dim 0, keeping the gradient to every rank's rows;
    identity in one process. Under DDP (which averages gradients) the parameters then get the
    gradient of the mean of the ranks' losses, as one process on the global batch would."""
    return _GatherWithGrad.apply(x) if is_on() else x


@torch.no_grad()
def shuffle_batch(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Shuffle the global batch (MoCo ``_batch_shuffle_ddp``; single-device variant of the colab).

    Returns this rank's part of the shuffled batch and the index that undoes it. Rank 0 draws the
    permutation and broadcasts it, so all ranks agree. Every rank draws ``randperm(world * n)``
    from its global RNG (the others discard theirs), so the ranks' RNG streams stay in step, and
    one process with the same RNG state and global batch draws the same permutation: rank r's
    part is the r-th contiguous chunk, which is split r of
    :class:`pretrain.model.encoders.SplitBatchNorm`.
    """
    full = gather(x)
    perm = torch.randperm(full.shape[0], device=x.device)
    if is_on():
        td.broadcast(perm, src=0)
    unshuffle = torch.argsort(perm)
    n = x.shape[0]
    mine = perm.view(world_size(), n)[rank()]
    return full[mine], unshuffle.view(world_size(), n)[rank()]


@torch.no_grad()
def unshuffle_batch(x: torch.Tensor, unshuffle: torch.Tensor) -> torch.Tensor:
    """Undo :func:`shuffle_batch` on this rank's outputs."""
    return gather(x)[unshuffle]


def allreduce_per_parameter(state: object, bucket: td.GradBucket) -> torch.futures.Future:
    """DDP comm hook: average each parameter's gradient in its own all-reduce.

    DDP's buckets change after its first backward (rebuilt in gradient-ready order), and a ring
    all-reduce at 3+ ranks sums an element in an order that depends on where it sits in the
    bucket; a run resumed mid-epoch reduces its first step in the initial layout, so it drifted
    from the uninterrupted run in the last bits. Reducing every gradient as its own tensor makes
    the result independent of the bucket layout: resume is bit-identical at any world size.
    Costs one collective per parameter tensor (ResNet-50: 161) instead of one per 25 MB bucket.
    """
    world = world_size()
    works = [td.all_reduce(g, async_op=True) for g in bucket.gradients()]
    buffer = bucket.buffer()

    def written(_: Any) -> torch.Tensor:
        grads = bucket.gradients()  # views into the buffer: the sums are already in place
        base = buffer.untyped_storage().data_ptr()
        if any(g.untyped_storage().data_ptr() != base for g in grads):
            buffer.copy_(torch.cat([g.reshape(-1) for g in grads]))
        return buffer.div_(world)

    return torch.futures.collect_all([w.get_future() for w in works]).then(written)


# DDP checks the hook's annotations as objects (this module's are strings)
allreduce_per_parameter.__annotations__.update(
    bucket=td.GradBucket, state=object, **{"return": torch.futures.Future[torch.Tensor]}
)


def finish(status: int, leave: bool = True) -> None:
    """End a process of a multi-rank run: barrier, destroy the process group, flush, and leave
    with ``status`` through ``os._exit`` (no interpreter teardown).

    After a finished run (``last.pt`` on disk) 2 of ~85 gloo runs at 4 ranks aborted at exit
    with "terminate called without an active exception": a c10d/gloo C++ thread still joinable
    when static destructors run. Destroying the group removes most of it but not provably all,
    so the exit skips teardown: a finished job always reports its real status. Does nothing in
    one process. ``leave=False`` (submitit, which must still write the task's result) only
    destroys the group.
    """
    if not is_on():
        return
    try:
        td.barrier()
        td.destroy_process_group()
    except Exception as e:  # a peer already gone: the status still stands
        print(f"warning: process group shutdown: {e}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    if leave:
        os._exit(status)
