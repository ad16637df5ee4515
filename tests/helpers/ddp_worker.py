"""A few training steps through the engine's own code, recorded for
tests/pretrain/runtime/test_ddp.py.

    python tests/helpers/ddp_worker.py OUT_DIR [key=value ...]           # one process
    torchrun --nproc_per_node 2 tests/helpers/ddp_worker.py OUT_DIR [key=value ...]  # 2 ranks
    python tests/helpers/ddp_worker.py --plan PLAN.json OUT_DIR  # several runs, one by one
    python tests/helpers/ddp_worker.py --control OUT_DIR  # one task of an srun-style launch

``--plan`` reads ``{name: [key=value, ...]}`` and makes each run in ``OUT_DIR/name`` in this one
process (one process group under torchrun): the launches and imports, ~90 % of a run's time,
are paid once for all. A run that raises writes ``OUT_DIR/name/error.txt`` and the next one
starts (a config error is raised on every rank alike).

Builds the run with ``pretrain.engine.loop.setup`` (so the process group, seeding, DDP wrapper and
key shuffle are the trainer's), runs ``train.steps`` (default 3) steps of ``loop.train_step`` on the
first batches of the sharded loader, and writes ``OUT_DIR/rank{R}.pt`` with, per step, this rank's
loss, the gradients the optimizer sees (after DDP's all-reduce: ``optimizer.step`` is wrapped to
snapshot ``.grad`` first), the queue keys, labels and pointer; at the end the parameters of both
encoders, the global RNG state, and the answers of ``dist.any_rank`` on a few patterns. The
models it builds use SiLU where the trainer's use ReLU (``smooth_activations``).
``--control`` only joins the group with ``dist.init_from_env`` and records the torch.distributed
variables it exported, the group's backend, the device and the ``dist.any_rank`` answers.
Not a test file: pytest does not collect it.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from negmine_core.step import Batch  # noqa: E402
from pretrain import config  # noqa: E402
from pretrain.engine import loop  # noqa: E402
from pretrain.runtime import dist  # noqa: E402

STEPS = 3


def snapshot_grads(run: loop.Run, into: list[dict[str, torch.Tensor]]) -> None:
    """Wrap ``run.optimizer.step`` so that each call first records the query encoder's grads."""
    named = list(run.moco.encoder_q.named_parameters())
    step = run.optimizer.step

    def recording_step(*args: Any, **kwargs: Any) -> Any:
        into.append({k: p.grad.detach().clone() for k, p in named if p.grad is not None})
        return step(*args, **kwargs)

    run.optimizer.step = recording_step


def any_rank_answers() -> dict[str, bool]:
    """``dist.any_rank`` where the flag is set on no rank, on the last rank only, on all ranks."""
    last = dist.rank() == dist.world_size() - 1
    return {
        "none": dist.any_rank(False),
        "last_only": dist.any_rank(last),
        "first_only": dist.any_rank(dist.rank() == 0),
        "all": dist.any_rank(True),
    }


def control(out: Path) -> None:
    device = dist.init_from_env()
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    result = {
        "rank": dist.rank(),
        "world_size": dist.world_size(),
        "backend": torch.distributed.get_backend() if dist.is_on() else None,
        "device": str(device),
        "env": {k: os.environ.get(k) for k in names},
        "any_rank": any_rank_answers(),
    }
    torch.save(result, out / f"control{dist.rank()}.pt")
    # the trainer's exit: barrier, destroy, os._exit (a gloo thread still joinable at interpreter
    # teardown aborts with "terminate called without an active exception": 2 of 3 runs on a
    # loaded 2-core machine)
    dist.finish(0)


def smooth_activations() -> None:
    """ReLU -> SiLU in every model this worker builds. The comparison is of the cross-rank logic,
    and a ReLU mask is discontinuous: where a pre-activation sits within float rounding of 0 (the
    digits' constant background puts whole feature maps there), a one-ulp difference between
    batch-16 and batch-8 kernels flips the mask and moves the gradients below it by 1e-3, on some
    seeds and CPUs and not others. SiLU is smooth, so rounding moves the gradients by rounding.
    ``F.relu`` is replaced, which ``nn.ReLU`` calls and so do split BN's fused ReLUs
    (``SplitBatchNorm.act``, FusedBasicBlock) off the Triton path."""
    functional = torch.nn.functional
    silu = functional.silu
    functional.relu = lambda x, inplace=False: silu(x, inplace=inplace)


def main(out: Path, overrides: list[str]) -> None:
    smooth_activations()
    record_run(out, overrides)
    dist.finish(0)  # as control(): barrier, destroy, os._exit under DDP; nothing in one process


def plan(path: Path, out: Path) -> None:
    """Each run of the plan in turn, in this process; a failure is written, not raised."""
    smooth_activations()
    for name, overrides in json.loads(path.read_text()).items():
        (out / name).mkdir(parents=True, exist_ok=True)
        try:
            record_run(out / name, overrides)
        except Exception:
            (out / name / "error.txt").write_text(traceback.format_exc())
    dist.finish(0)


def record_run(out: Path, overrides: list[str]) -> None:
    """Build the run, take ``STEPS`` steps and write ``out/rank{R}.pt``."""
    cfg = config.load("digits_moco.yaml", [f"out_dir={out / 'run'}", *overrides])
    run = loop.setup(cfg)  # with the loss's setup (CIDER: class means, same on every rank)
    grads: list[dict[str, torch.Tensor]] = []
    snapshot_grads(run, grads)
    steps, record = run.derived.steps_per_epoch, []
    run.data.sampler.set_epoch(0, 0)
    run.moco.train()
    for i, (x1, x2, y, index, *rows) in enumerate(run.data.train_loader):
        if i == STEPS:
            break
        epoch = i / steps
        loop.set_lr(run, epoch)
        loss = loop.train_step(run, Batch.make(x1, x2, y, rows), epoch)
        record.append(
            {
                "index": index.clone(),
                "loss": loss.detach().clone(),
                "keys": run.queue.keys.clone(),
                "labels": run.queue.labels.clone(),
                "ptr": run.queue.ptr.clone(),
                "strategy": {
                    k: v.detach().clone()
                    for k, v in run.strategy.state_dict().items()
                    if isinstance(v, torch.Tensor)
                },  # fmt: skip  (AdCo's bank)
            }
        )
    for step, g in zip(record, grads, strict=True):
        step["grads"] = g
    result = {
        "rank": dist.rank(),
        "world_size": dist.world_size(),
        "ddp": isinstance(run.moco.query_encoder, torch.nn.parallel.DistributedDataParallel),
        "shuffle_keys": run.moco.shuffle_keys,
        "symmetric_keys": run.moco.symmetric_keys,
        "steps": record,
        "encoder_q": {k: v.detach().clone() for k, v in run.moco.encoder_q.named_parameters()},
        "encoder_k": {k: v.detach().clone() for k, v in run.moco.encoder_k.named_parameters()},
        "rng": torch.get_rng_state(),
        "any_rank": any_rank_answers(),
    }
    torch.save(result, out / f"rank{dist.rank()}.pt")
    run.close()


if __name__ == "__main__":
    if sys.argv[1] == "--control":
        control(Path(sys.argv[2]))
    elif sys.argv[1] == "--plan":
        plan(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        main(Path(sys.argv[1]), sys.argv[2:])
