"""benchmarks/gpu_suite.sh does not rot: on a CPU it runs in --quick mode into a results file,
skipping what needs CUDA with a printed note; each part ends with a line (outcome, seconds) in the
results file, and a part killed by its time budget leaves the tables of the parts before it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from test_ddp import clean_env

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "benchmarks" / "gpu_suite.sh"


def suite(*args: str) -> subprocess.CompletedProcess:
    env = clean_env(CUDA_VISIBLE_DEVICES="")  # a CPU run even on a GPU machine
    return subprocess.run(["bash", str(SUITE), *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=900)  # fmt: skip


def part_lines(text: str) -> dict[str, str]:
    """The suite's ``- part: outcome in N s`` lines of a results file: part -> outcome."""
    return dict(re.findall(r"^- (\w+): (.+?)(?: in \d+ s)?$", text, flags=re.M))


def test_gpu_suite_runs_on_cpu_in_quick_mode(tmp_path):
    results = tmp_path / "results.md"
    default = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    proc = suite("--quick", "--results", str(results))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = results.read_text()
    assert "## GPU suite" in text and "on cpu" in text
    assert "skip: cuda-marked tests (no CUDA device)" in proc.stdout
    assert "skip: --sync-debug error (CUDA only)" in proc.stdout
    for script in ("step.py", "split_bn.py", "ocsvm.py", "input.py"):  # the convention's flags
        assert f"benchmarks/{script}" in proc.stdout
    parts = part_lines(text)
    assert parts["sync"].startswith("skipped") and parts["tests"].startswith("skipped")
    assert parts["step"] == parts["splitbn"] == parts["ocsvm"] == parts["input"] == "passed", parts
    assert re.search(r"^gpu_suite: part step: passed in \d+ s$", proc.stdout, flags=re.M)
    assert "## Training step" in text and "OC-SVM fit and scoring" in text  # their tables landed
    assert "## Input pipeline" in text and "## Split BatchNorm paths" in text
    # in order: each part's line right after its own table, the total last
    order = [text.index(s) for s in ("## Training step", "- step: passed", "OC-SVM fit and",
                                     "- ocsvm: passed", "## Input pipeline", "- input: passed",
                                     "- suite: ")]  # fmt: skip
    assert order == sorted(order)
    assert (ROOT / "benchmarks" / "RESULTS.md").read_text() == default  # --results was obeyed


def test_a_part_past_its_budget_is_killed_and_earlier_tables_stay(tmp_path):
    """A 1-second budget for the input part: killed (exit 1), the OC-SVM table before it kept,
    and the suite's closing line still written."""
    results = tmp_path / "results.md"
    proc = suite("--quick", "--results", str(results), "--parts", "ocsvm,input",
                 "--budget", "input=1")  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = results.read_text()
    assert "OC-SVM fit and scoring" in text and "## Input pipeline" not in text
    parts = part_lines(text)
    assert parts["ocsvm"] == "passed" and parts["input"] == "timed out (budget 1 s)", parts
    assert "step" not in parts and "sync" not in parts  # not selected, not run
    assert "gpu_suite: part input: timed out (budget 1 s) in" in proc.stdout
    assert "exit status 1" in text.splitlines()[-1]


@pytest.mark.parametrize(
    "args", [["--budget", "ocsvm=0"], ["--budget", "nope=5"], ["--parts", "step,nope"], ["-x"]]
)
def test_bad_usage_exits_2_before_running_anything(tmp_path, args):
    results = tmp_path / "results.md"
    proc = suite("--quick", "--results", str(results), *args)
    assert proc.returncode == 2 and not results.exists(), proc.stdout + proc.stderr
