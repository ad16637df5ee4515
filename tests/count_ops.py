"""Count the aten ops of one steady-state training step (a proxy for CUDA kernel launches), per
recipe x negative strategy, on the device path of split BatchNorm and on the CPU's.

    python tests/count_ops.py            # prints the markdown table of docs/step_counts.md
    python tests/count_ops.py --one cifar10_moco mioc   # one count

Each setting is built by the trainer's own ``engine.setup`` from the recipe (``cifar10_moco.yaml``
on a tiny CIFAR-10 written in its true format, ``digits_moco.yaml``) at tiny sizes that do not
change what is dispatched (batch 16, queue 64; the model, its BN splits, the augmentation and the
precision are the recipe's, amp as on CUDA: bf16 for CIFAR-10, off for digits), runs ``WARM`` steps
of ``engine.train_step`` (the optimizer's momentum buffers exist after the first), then counts one
step with :class:`op_counter.OpCounter`: augmentation (stage 2), both encoders, strategy, loss,
backward, optimizer, momentum update, enqueue. ``fused`` forces the split-BN path (True: CUDA's,
False: the CPU's per-split one). Not a test file: ``tests/test_step_ops.py`` imports it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from count_steps import STRATEGY_KWARGS, ready  # noqa: E402  (STRATEGY_KWARGS: tiny sizes)
from fakedata import write_cifar10  # noqa: E402
from op_counter import OpCounter  # noqa: E402

import negatives  # noqa: E402
from pretrain import config, engine  # noqa: E402
from pretrain.split_bn import use_fused  # noqa: E402

WARM = 2
EPOCH = 1.5  # past every warm-up (warmup_epochs=0 in STRATEGY_KWARGS)
TINY = ["train.batch_size=16", "moco.queue_size=64", "data.num_workers=0"]
TINY += ["train.progress_bar=false"]
RECIPES = {"cifar10_moco": ["train.amp=bf16"], "digits_moco": ["train.amp='off'"]}


@cache
def cifar_root() -> str:
    root = tempfile.mkdtemp(prefix="negmine_ops_")
    write_cifar10(Path(root), per_batch=16, test=16)
    return root


def overrides(recipe: str, strategy: str) -> list[str]:
    out = [*TINY, *RECIPES[recipe], f"negatives.name={strategy}"]
    out.append(f"negatives.kwargs={STRATEGY_KWARGS.get(strategy, '{}')}")
    if negatives.strategies.get(strategy).replaces_queue:  # adco: its bank, not the queue
        out += ["loss.name=nt_xent", "loss.contrast_queue=false"]
    if recipe.startswith("cifar10"):
        out.append(f"data.root={cifar_root()}")
    return out


def count(recipe: str, strategy: str = "none", fused: bool = True) -> OpCounter:
    """The ops of one steady-state step of ``recipe`` with ``strategy``."""
    out_dir = tempfile.mkdtemp(prefix="negmine_ops_run_")
    cfg = config.load(f"{recipe}.yaml", [f"out_dir={out_dir}", *overrides(recipe, strategy)])
    run = engine.setup(cfg)
    use_fused(run.moco, fused)
    ready(run)
    for i, (x1, x2, y, _, *rows) in enumerate(run.data.train_loader):  # rows: stage-2 params
        x1, x2, y, *rows = (t.to(run.device) for t in (x1, x2, y, *rows))
        engine.set_lr(run, EPOCH)
        if i < WARM:
            engine.train_step(run, x1, x2, y, EPOCH, *rows)
            continue
        with OpCounter() as ops:
            engine.train_step(run, x1, x2, y, EPOCH, *rows)
        break
    run.log.close()
    return ops


def table() -> list[str]:
    """The markdown rows of docs/step_counts.md's op tables (device path per strategy, then the
    CPU path of plain MoCo)."""
    rows = ["| recipe | strategy | ops per step | added vs `none` |", "|---|---|---|---|"]
    for recipe in RECIPES:
        base = count(recipe).count
        for strategy in negatives.list_strategies():
            n = count(recipe, strategy).count
            rows.append(f"| {recipe} | {strategy} | {n} | {100 * (n - base) / base:+.1f} % |")
    rows += ["", "| recipe | path | ops per step | of them batch_norm |", "|---|---|---|---|"]
    for recipe in RECIPES:
        for fused, path in ((True, "device (fused split BN)"), (False, "CPU (per-split BN)")):
            ops = count(recipe, fused=fused)
            rows.append(f"| {recipe} | {path} | {ops.count} | {ops.matching('batch_norm')} |")
    return rows


def count_in_subprocess(recipe: str, strategy: str) -> int:
    """:func:`count` in a fresh process with TRITON_INTERPRET=1: MiOC's Triton program runs in
    Triton's interpreter only if that is chosen before triton is first imported, which a test
    session may have done already (compiling the kernel for a GPU)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, __file__, "--one", recipe, strategy]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return int(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:  # python tests/count_ops.py --one RECIPE STRATEGY
        print(count(sys.argv[2], sys.argv[3]).count)
    else:
        print("\n".join(table()))
