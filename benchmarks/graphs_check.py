"""``train.cuda_graphs`` against eager: the same short cifar10_moco run captured and eager, their
logged losses compared step by step, and the captured run stopped halfway (a checkpoint) and
resumed by the same command, its final state compared with the eager run's (the GPU suite's
``graphs`` part; what ``train.cuda_graphs: auto`` rests on, pretrain/engine/cuda_graphs.py).

    python benchmarks/graphs_check.py [--device cuda] [--steps 20] [--rtol 0.02] [--state-rtol 0.02]
        [--keep DIR]
    python benchmarks/graphs_check.py --device cpu --quick   # the plumbing, every run eager (CI)

Runs: ``eager`` (``train.cuda_graphs=off``, ``--steps`` steps), ``captured``
(``train.cuda_graphs=on``, ``train.max_steps`` at half, then the same command with
``--steps``: the resume from its checkpoint re-captures). The data is a stand-in CIFAR-10 written
in its own pickle format (pretrain/testing/fakedata.py: 2,560 random 32-px training images, 5
steps per epoch at batch 512; the queue cut to 512 keys, below the training set as the trainer
requires), so the run needs no download and crosses epochs (where the graph is re-captured for
the new learning rate) after its 3 eager warm-up steps. Exit 0 when every run ends (exit 0),
every logged loss agrees within ``--rtol`` (relative) and every floating tensor of the final
checkpoints' model and queue agrees within ``--state-rtol`` (the norm of the difference over the
eager tensor's norm); 1 otherwise, naming the first disagreement.

A replay reuses the eager step's kernels on the same seed, so only reduction order and cuDNN's
algorithm choice can differ (bf16 autocast): on an H200 (2026-11-28, d66eca4) 10 steps agreed
within 7e-4 (relative 1.1e-4). A broken capture (stale inputs, a frozen learning rate, a missed
optimizer step, a resume that loses the queue) moves the loss or the state by far more. On a CPU
(``--device cpu``) the captured run cannot exist (refused there), so every run is eager and must
agree exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["model.arch=resnet_small", "model.width=8", "train.batch_size=32", "model.bn_splits=2",
         "moco.queue_size=64", "train.amp=off"]  # fmt: skip


def losses(metrics: Path) -> dict[int, float]:
    """global_step -> loss of a run's ``step`` records."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return {r["global_step"]: r["loss"] for r in rows if r.get("kind") == "step"}


def compare(captured: dict[int, float], eager: dict[int, float], rtol: float) -> str | None:
    """The first disagreement of two loss series (None when they agree): the same logged steps,
    each loss within ``rtol`` of the eager one (relative)."""
    if not eager:
        return "the eager run logged no step"
    if sorted(captured) != sorted(eager):
        return f"logged steps differ: {sorted(captured)} vs {sorted(eager)}"
    for step in sorted(eager):
        a, b = captured[step], eager[step]
        if not abs(a - b) <= rtol * abs(b):  # NaN fails
            return f"step {step}: loss {a!r} captured vs {b!r} eager (rtol {rtol})"
    return None


def state_gap(captured: Path, eager: Path, rtol: float) -> str | None:
    """The first tensor of the two final checkpoints' model and queue that differs by more than
    ``rtol`` (``||a - b|| / ||b||``), or None."""
    import torch

    a, b = (torch.load(p, map_location="cpu", weights_only=True) for p in (captured, eager))
    names = [k for k in ("model", "queue") if k in b]
    if not names:
        return f"{eager.name}: no model or queue in the checkpoint"
    for key in names:
        for name, want in flat(b[key]).items():
            got = flat(a[key]).get(name)
            if got is None:
                return f"{key}.{name}: missing from the captured run's checkpoint"
            if not want.is_floating_point():
                if not torch.equal(got, want):
                    return f"{key}.{name}: differs"
                continue
            gap = (got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-12)
            if not float(gap) <= rtol:  # NaN fails
                return f"{key}.{name}: relative difference {float(gap):.3g} > {rtol}"
    return None


def flat(obj: object, prefix: str = "") -> dict:
    """name -> tensor of a nested state dict."""
    import torch

    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    if isinstance(obj, dict):
        pairs = (flat(x, f"{prefix}.{n}".strip(".")) for n, x in obj.items())
        return {k: v for d in pairs for k, v in d.items()}
    return {}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rtol", type=float, default=0.02)
    p.add_argument("--state-rtol", type=float, default=0.02)
    p.add_argument("--keep", default="", help="copy the runs' metrics.jsonl into this folder")
    p.add_argument("--quick", action="store_true", help="a tiny model, 128 images (CPU check)")
    a = p.parse_args()
    if a.steps < 2:
        p.error("--steps must be at least 2 (the captured run stops at half and resumes)")
    sys.path.insert(0, str(ROOT))
    from pretrain.testing.fakedata import write_cifar10

    env = {**os.environ, "NEGMINE_DEVICE": a.device, "PYTHONPATH": str(ROOT)}
    half = a.steps // 2
    with tempfile.TemporaryDirectory(prefix="graphs_check_") as tmp:
        data = Path(tmp) / "cifar10"
        write_cifar10(data, per_batch=32 if a.quick else 512, test=64)
        common = ["--cfg", "cifar10_moco.yaml", f"data.root={data}", "train.log_every=1",
                  "eval.knn_every=0", "data.num_workers=2",
                  *(QUICK if a.quick else ["moco.queue_size=512"])]  # fmt: skip
        graphs = "on" if a.device == "cuda" else "off"
        runs = (("eager", ["train.cuda_graphs=off"], [a.steps]),
                ("captured", [f"train.cuda_graphs={graphs}"], [half, a.steps]))  # fmt: skip
        series = {}
        for name, extra, stops in runs:
            out = Path(tmp) / name
            for stop in stops:  # the second is a resume: the same command, a later max_steps
                cmd = [sys.executable, "-m", "pretrain", *common, *extra,
                       f"train.max_steps={stop}", f"out_dir={out}"]  # fmt: skip
                print("$", " ".join(cmd), flush=True)
                rc = subprocess.run(cmd, cwd=ROOT, env=env).returncode
                if rc != 0:
                    print(f"graphs_check: the {name} run failed (exit {rc})", flush=True)
                    return 1
            metrics = out / "metrics.jsonl"
            if a.keep and metrics.exists():
                Path(a.keep).mkdir(parents=True, exist_ok=True)
                shutil.copy(metrics, Path(a.keep) / f"graphs_{name}.metrics.jsonl")
            series[name] = losses(metrics)
        for step in sorted(series["eager"]):
            print(f"step {step}: captured {series['captured'].get(step)!r} eager "
                  f"{series['eager'][step]!r}")  # fmt: skip
        exact = a.device == "cpu"
        bad = compare(series["captured"], series["eager"], 0.0 if exact else a.rtol)
        last = [Path(tmp) / n / "checkpoints" / "last.pt" for n in ("captured", "eager")]
        bad = bad or state_gap(*last, 0.0 if exact else a.state_rtol)
    print(f"graphs_check: {bad or 'the losses and the resumed state agree'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
