"""``train.cuda_graphs`` against eager: the same short cifar10_moco run twice, once captured and
once eager, and their logged losses compared step by step (the GPU suite's ``graphs`` part).

    python benchmarks/graphs_check.py [--device cuda] [--steps 10] [--rtol 0.02] [--keep DIR]
    python benchmarks/graphs_check.py --device cpu --quick   # the plumbing, both runs eager (CI)

The data is a stand-in CIFAR-10 written in its own pickle format (pretrain/testing/fakedata.py:
2,560 random 32-px training images, 5 steps per epoch at batch 512; the queue cut to 512 keys, below
the training set as the trainer requires), so the run needs no download and
crosses an epoch (where the graph is re-captured for the new learning rate) after its 3 eager
warm-up steps. Exit 0 when both runs end (exit 0) and every logged loss agrees within ``--rtol``
(relative); 1 otherwise, naming the first disagreement; each run's own output is printed.

The tolerance is a guess until a GPU run measures it: a replay reuses the eager step's kernels on
the same seed, so only reduction order and cuDNN's algorithm choice can differ (bf16 autocast);
a broken capture (stale inputs, a frozen learning rate, a missed optimizer step) moves the loss
by far more within 10 steps. On a CPU (``--device cpu``) the captured run cannot exist
(``train.cuda_graphs`` is refused there), so both runs are eager and must agree exactly.
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rtol", type=float, default=0.02)
    p.add_argument("--keep", default="", help="copy both runs' metrics.jsonl into this folder")
    p.add_argument("--quick", action="store_true", help="a tiny model, 128 images (CPU check)")
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    from pretrain.testing.fakedata import write_cifar10

    env = {**os.environ, "NEGMINE_DEVICE": a.device, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory(prefix="graphs_check_") as tmp:
        data = Path(tmp) / "cifar10"
        write_cifar10(data, per_batch=32 if a.quick else 512, test=64)
        common = ["--cfg", "cifar10_moco.yaml", f"data.root={data}", f"train.max_steps={a.steps}",
                  "train.log_every=1", "eval.knn_every=0", "data.num_workers=2",
                  *(QUICK if a.quick else ["moco.queue_size=512"])]  # fmt: skip
        graphs = "true" if a.device == "cuda" else "false"
        series = {}
        for name, extra in (("captured", [f"train.cuda_graphs={graphs}"]), ("eager", [])):
            out = Path(tmp) / name
            cmd = [sys.executable, "-m", "pretrain", *common, *extra, f"out_dir={out}"]
            print("$", " ".join(cmd), flush=True)
            rc = subprocess.run(cmd, cwd=ROOT, env=env).returncode
            metrics = out / "metrics.jsonl"
            if a.keep and metrics.exists():
                Path(a.keep).mkdir(parents=True, exist_ok=True)
                shutil.copy(metrics, Path(a.keep) / f"graphs_{name}.metrics.jsonl")
            if rc != 0:
                print(f"graphs_check: the {name} run failed (exit {rc})", flush=True)
                return 1
            series[name] = losses(metrics)
    for step in sorted(series["eager"]):
        print(f"step {step}: captured {series['captured'].get(step)!r} eager "
              f"{series['eager'][step]!r}")  # fmt: skip
    bad = compare(series["captured"], series["eager"], 0.0 if a.device == "cpu" else a.rtol)
    print(f"graphs_check: {bad or 'the losses agree'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
