"""benchmarks/gpu_suite.sh does not rot: on a CPU it runs in --quick mode into a results file,
skipping what needs CUDA with a printed note."""

from __future__ import annotations

import subprocess
from pathlib import Path

from test_ddp import clean_env

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_suite_runs_on_cpu_in_quick_mode(tmp_path):
    results = tmp_path / "results.md"
    default = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    env = clean_env(CUDA_VISIBLE_DEVICES="")  # a CPU run even on a GPU machine
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_suite.sh"), "--quick", "--results", str(results)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = results.read_text()
    assert "## GPU suite" in text and "on cpu" in text
    assert "skip: cuda-marked tests (no CUDA device)" in proc.stdout
    assert "skip: --sync-debug error (CUDA only)" in proc.stdout
    for script in ("step.py", "ocsvm.py", "input.py"):  # each ran with the convention's flags
        assert f"benchmarks/{script}" in proc.stdout and f"{script}: skipped" not in text
    assert "## Training step" in text and "OC-SVM fit and scoring" in text  # their tables landed
    assert "## Input pipeline" in text
    assert (ROOT / "benchmarks" / "RESULTS.md").read_text() == default  # --results was obeyed
