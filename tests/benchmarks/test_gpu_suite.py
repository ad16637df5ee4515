"""benchmarks/gpu_suite.sh does not rot: on a CPU it runs in --quick mode into a report folder,
skipping what needs CUDA with a printed note; each part's whole output lands in its own log, each
part ends with a line (outcome, seconds) in the results file and a row in the summary, a part
killed by its time budget leaves the tables of the parts before it, the total budget holds, and
the CUDA plan (--dry-run --device cuda) names every part within 10 minutes (one device command).
The train and profile parts run on the CPU in --quick mode in CI: their tables and the summary's
figures."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from pretrain import config
from tests.helpers.ddp import clean_env
from tests.helpers.paths import ROOT

SUITE = ROOT / "benchmarks" / "gpu_suite.sh"
PARTS = ["tests", "sync", "mioc", "graphs", "splitbn", "ocsvm", "step", "input", "profile",
         "train", "peers"]  # fmt: skip
TRAIN_RUNS = ("moco_loader", "mioc_resident")  # --quick: both recipes, both data paths
CATEGORIES = ("convolutions/matmuls", "split BN", "other elementwise", "optimizer",
              "strategy + loss")  # fmt: skip


def suite(*args: str) -> subprocess.CompletedProcess:
    env = clean_env(CUDA_VISIBLE_DEVICES="")  # a CPU run even on a GPU machine
    return subprocess.run(["bash", str(SUITE), *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=1500)  # fmt: skip


def part_lines(text: str) -> dict[str, str]:
    """The suite's ``- part: outcome in N s`` lines of a results file: part -> outcome."""
    return dict(re.findall(r"^- (\w+): (.+?)(?: in \d+ s)?$", text, flags=re.M))


def summary_rows(report: Path) -> dict[str, str]:
    """REPORT/summary.md's rows: part -> outcome."""
    rows = re.findall(r"^\| (\w+) \| (.+?) \| \d+ \|", (report / "summary.md").read_text(), re.M)
    return {part: outcome for part, outcome in rows if part != "part"}


@pytest.mark.slow  # ~2 min on 2 cores: every part end to end on a CPU; the plan, budget and
# report tests below check the suite's logic in CI, and the train and profile parts run in CI
# below
def test_gpu_suite_runs_on_cpu_in_quick_mode(tmp_path):
    report = tmp_path / "gpu"
    default = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    proc = suite("--quick", "--report", str(report))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (report / "results.md").read_text()  # --report alone: the tables go in the folder
    assert "## GPU suite" in text and "on cpu" in text
    assert "skip: cuda-marked tests (no CUDA device)" in proc.stdout
    assert "skip: --sync-debug error (CUDA only)" in proc.stdout
    assert "skip: train.cuda_graphs (CUDA only)" in proc.stdout
    for script in ("step.py", "split_bn.py", "ocsvm.py", "input.py"):  # the convention's flags
        assert f"benchmarks/{script}" in proc.stdout
    parts = part_lines(text)
    for name in ("tests", "sync", "graphs"):
        assert parts[name].startswith("skipped"), parts
    for name in ("mioc", "splitbn", "ocsvm", "step", "input", "profile", "train", "peers"):
        assert parts[name] == "passed", parts
        log = (report / f"{name}.log").read_text()  # the part's whole output, command first
        assert log.startswith("$ python ") and len(log.splitlines()) > 1, log
    assert "train.max_steps=4 reached" in (report / "mioc.log").read_text()  # the quick start ran
    assert (report / "mioc.metrics.jsonl").stat().st_size > 0
    assert re.search(r"^gpu_suite: part step: passed in \d+ s$", proc.stdout, flags=re.M)
    assert "## Training step" in text and "OC-SVM fit and scoring" in text  # their tables landed
    assert "## Input pipeline" in text and "## Split BatchNorm paths" in text
    assert "## Profile of the training step" in text and "## Training runs" in text
    # in order: each part's line right after its own table, the total last
    order = [text.index(s) for s in ("## Split BatchNorm paths", "- splitbn: passed",
                                     "OC-SVM fit and", "- ocsvm: passed", "## Training step",
                                     "- step: passed", "## Input pipeline", "- input: passed",
                                     "- suite: ")]  # fmt: skip
    assert order == sorted(order)
    rows = summary_rows(report)
    assert list(rows) == PARTS and all(rows[p] == "passed" for p in PARTS if parts[p] == "passed")
    assert rows["graphs"] == "skipped: train.cuda_graphs (CUDA only)", rows
    env = (report / "env.txt").read_text()
    assert "device: cpu" in env and "torch: " in env and "commit: " in env
    with tarfile.open(f"{report}.tar.gz") as tar:  # the whole folder in one file
        names = set(tar.getnames())
    assert {f"gpu/{f}" for f in ("summary.md", "results.md", "env.txt", "mioc.log")} <= names
    assert (ROOT / "benchmarks" / "RESULTS.md").read_text() == default  # nothing written there


def figures(report: Path) -> dict[str, str]:
    """The summary's table of the train and profile figures: figure -> value."""
    text = (report / "summary.md").read_text()
    assert "| figure (train, profile) | value |" in text, text
    rows = re.findall(r"^\| ((?:train|profile) .+?) \| (.+?) \|$", text, flags=re.M)
    return dict(rows)


@pytest.mark.early  # about a minute on 2 cores: starts first under xdist (tests/conftest.py)
def test_train_and_profile_parts_run_on_cpu_in_quick_mode(tmp_path):
    """The train part (--quick: MoCo from the loader, MiOC resident) trains a whole epoch
    through python -m pretrain and reports its epoch time, images/s, data-wait and kNN, MiOC its
    OC-SVM path; the profile part: the top operators and the step split into its parts beside the
    bare model's step. Both print their tables; the summary gives their figures in one table."""
    report = tmp_path / "gpu"
    default = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    proc = suite("--quick", "--report", str(report), "--parts", "profile,train")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary_rows(report) == {"profile": "passed", "train": "passed"}
    profile = (report / "profile.log").read_text()
    assert profile.startswith("$ python benchmarks/profile_step.py --device cpu")
    assert "## Profile of the training step" in profile
    assert "| operator (self CPU time) | calls per step | ms per step |" in profile
    assert "aten::" in profile and "the bare model's step" in profile
    shares = {m[0]: float(m[1]) for m in re.findall(r"^\| (.+?) \| ([\d.]+) \| [\d.]+ % \|$",
                                                     profile, flags=re.M)}  # fmt: skip
    assert all(any(name.startswith(c) for name in shares) for c in CATEGORIES), shares
    assert shares["convolutions/matmuls"] > 0 and shares["optimizer"] > 0, shares
    train = (report / "train.log").read_text()
    assert "## Training runs (CIFAR-10 recipes)" in train
    for run in TRAIN_RUNS:
        row = re.search(rf"^\| {run} \| 1 \| ([\d.]+) \| (\d+) \| (\d+) % \| ([\d.]+) \|$",
                        train, flags=re.M)  # fmt: skip
        assert row and float(row.group(1)) > 0 and int(row.group(2)) > 0, (run, train[-3000:])
        assert (report / "train" / f"{run}.metrics.jsonl").stat().st_size > 0
    got = figures(report)
    for run in TRAIN_RUNS:
        (key,) = [k for k in got if k.startswith(f"train {run}:")]
        epochs, _, _, _, knn, path = (v.strip() for v in got[key].split(","))
        assert epochs == "1" and float(knn) >= 0, got[key]
        assert path == ("host" if run.startswith("mioc") else "-"), got[key]
    assert any(k.startswith("profile cifar10_moco.yaml: step ms") for k in got), got
    assert (ROOT / "benchmarks" / "RESULTS.md").read_text() == default


def test_a_part_past_its_budget_is_killed_and_earlier_tables_stay(tmp_path):
    """A 1-second budget for the input part: killed (exit 1), its log kept and its tail printed,
    the split-BN table before it kept (the cheapest part, 4 s), and the suite's closing line
    still written; --results
    elsewhere: this run's part of that file is copied beside the logs."""
    results, report = tmp_path / "results.md", tmp_path / "rep"
    results.write_text("# an earlier run\n")
    proc = suite("--quick", "--results", str(results), "--report", str(report),
                 "--parts", "splitbn,input", "--budget", "input=1")  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = results.read_text()
    assert "## Split BatchNorm paths" in text and "## Input pipeline" not in text
    parts = part_lines(text)
    assert parts["splitbn"] == "passed" and parts["input"] == "timed out (budget 1 s)", parts
    assert "step" not in parts and "sync" not in parts  # not selected, not run
    assert "gpu_suite: part input: timed out (budget 1 s) in" in proc.stdout
    assert "  input | $ python benchmarks/input.py" in proc.stdout  # the log's tail
    assert (report / "input.log").read_text().startswith("$ python benchmarks/input.py")
    assert "exit status 1" in text.splitlines()[-1]
    copy = (report / "results.md").read_text()
    assert copy.lstrip().startswith("## GPU suite") and "an earlier run" not in copy
    assert summary_rows(report) == {"splitbn": "passed", "input": "timed out (budget 1 s)"}


def test_the_total_budget_holds_parts_that_would_pass_it(tmp_path):
    """--total 15: less than the 12 s kill margin plus 5 s is left for any part, so none runs;
    each is named as not run, and that is a failure."""
    report = tmp_path / "rep"
    proc = suite("--quick", "--report", str(report), "--parts", "mioc,step", "--total", "15")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = summary_rows(report)
    assert rows == {p: "not run (15 s of --total spent)" for p in ("mioc", "step")}, rows
    assert not (report / "mioc.log").exists()


def test_the_cuda_plan_runs_every_part_within_10_minutes(tmp_path):
    """--dry-run --device cuda on a CPU: every part with its CUDA command, nothing run or
    written; budgets within the total, the total under 10 minutes less the set-up (one command on
    a lent GPU runs at most 10 minutes); the pretrain commands' overrides are valid config keys."""
    report = tmp_path / "rep"
    proc = suite("--dry-run", "--device", "cuda", "--report", str(report))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    budgets = {p: int(b) for p, b in re.findall(r"part (\w+) \(budget (\d+) s\)", proc.stdout)}
    assert list(budgets) == PARTS, proc.stdout
    total = int(re.search(r"held under (\d+) s", proc.stdout).group(1))
    assert sum(budgets.values()) <= total <= 10 * 60 - 30  # the margins: the test below
    commands = {p: c for p, _, c in re.findall(r"^gpu_suite: plan: part (\w+) \(budget (\d+) s\): "
                                               r"(.+)$", proc.stdout, flags=re.M)}  # fmt: skip
    assert list(commands) == PARTS
    assert commands["tests"].endswith("-m cuda tests")
    assert '--sync-debug error --steps 3 --settings "bf16 channels_last"' in commands["sync"]
    assert commands["graphs"].startswith("python benchmarks/graphs_check.py --device cuda")
    assert "--device cuda" in commands["splitbn"] and "--parts trainer decode" in commands["input"]
    assert commands["profile"].startswith("python benchmarks/profile_step.py --device cuda")
    assert " --capture both " in commands["profile"]  # the eager step, then the captured one
    assert commands["train"].startswith("python benchmarks/train.py --device cuda")
    assert f"--budget {budgets['train'] - 15} " in commands["train"]  # stops before its kill
    assert "--runs moco_resident --capture on " in commands["train"]  # eager: the profile's
    assert commands["peers"].startswith("python benchmarks/peers.py --device cuda")
    assert f"--budget {budgets['peers'] - 30} " in commands["peers"]  # kNN, OC-SVM, tables after
    assert "--precision fp32 " in commands["peers"]  # the matched pair at lightly's precision
    assert commands["ocsvm"].endswith("--quick --generators clustered")  # the targets' points
    assert "--parts" not in commands["peers"]  # the moco part (two-key layout) and the OC-SVM
    for part in ("train", "peers", "ocsvm", "profile"):  # every flag is the script's own
        script = ROOT / commands[part].split()[1]
        flags = {f for f in commands[part].split() if f.startswith("--")}
        assert all(f'"{f}"' in script.read_text() for f in flags), (part, flags)
    mioc = commands["mioc"].split()
    assert mioc[:5] == ["python", "-m", "pretrain", "--cfg", "digits_mioc.yaml"]
    cfg = config.load("digits_mioc.yaml", mioc[5:])
    assert 0 < cfg.train.max_steps < 200
    assert not report.exists()


def test_the_cpu_plan_profiles_the_eager_step_alone(tmp_path):
    """A CPU cannot capture: the profile part's plan there has no --capture (profile_step.py
    would refuse it, exit 2)."""
    proc = suite("--dry-run", "--device", "cpu", "--quick", "--report", str(tmp_path / "rep"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (profile,) = re.findall(r"^gpu_suite: plan: part profile \(budget \d+ s\): (.+)$", proc.stdout,
                            flags=re.M)  # fmt: skip
    assert profile.startswith("python benchmarks/profile_step.py --device cpu")
    assert "--capture" not in profile and "--quick" in profile


# The H200 records of 2026-11-28 (benchmarks/RESULTS.md): d66eca4 (`--total 300`, then `--parts
# profile,train,peers --total 200`) and bf56f2b (`--parts graphs,ocsvm,splitbn,tests,sync`), each
# part's seconds where it ended, the newer record where both have one:
# - bf56f2b: tests 79 (with the new CUDA tests), sync 53, splitbn 17 (the triton_onepass column);
# - d66eca4: mioc 18, step 29;
# - graphs (bf56f2b, timed out at 64 s): the eager run 33 s with its start, the captured half
#   ~17 s, its resume cut at ~14 s: 33 + 17 + 17 + 1 (the comparison) = 68, an estimate;
# - ocsvm (bf56f2b, timed out at 30 s after the clustered n = 256 rows, the triton_regs loop's
#   compiles among them): 40 for the clustered points' four sizes, an estimate;
# - profile (d66eca4, killed at its 25 s budget with its eager table printed): about 35 s, and
#   ~8 s more for the captured step's warm-up, capture, timed and profiled replays: 43;
# - train (d66eca4, 80 s for captured and eager in 37 s each): the captured run alone, 80 less
#   the eager run's 34 s wall: 46.
# input (cut at 26 s by --total at d66eca4) and peers (killed at 58 s at d66eca4, after one epoch
# per run at 10,240 images) ran shorter commands since and have no figure yet.
H200_SECONDS = {"tests": 79, "sync": 53, "mioc": 18, "graphs": 68, "splitbn": 17, "ocsvm": 40,
                "step": 29, "profile": 43, "train": 46}  # fmt: skip
SUITE_OVERHEAD_S = 16  # the suite's own seconds: 14 with 8 parts, 11 with 3 (the same record)
KILL_MARGIN_S = 12  # a part gets what is left of --total less this (SIGKILL 10 s after SIGTERM)


def test_the_cuda_plan_fits_570_s_with_a_margin_over_the_h200_record(tmp_path):
    """Every part in the CUDA plan, each budget at least its measured seconds + 10 %, and the
    budgets, the suite's own time and the kill margin within --total's 570 s: the last part
    (peers) gets its whole budget even when every part before it runs to the end of its own."""
    proc = suite("--dry-run", "--device", "cuda", "--report", str(tmp_path / "rep"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    budgets = {p: int(b) for p, b in re.findall(r"part (\w+) \(budget (\d+) s\)", proc.stdout)}
    assert list(budgets) == PARTS, proc.stdout
    total = int(re.search(r"held under (\d+) s", proc.stdout).group(1))
    assert total == 570
    assert sum(budgets.values()) + SUITE_OVERHEAD_S + KILL_MARGIN_S <= total, budgets
    short = {p: (budgets[p], s) for p, s in H200_SECONDS.items()
             if 10 * budgets[p] < 11 * s}  # fmt: skip
    assert not short, short
    assert f"{sum(budgets.values())} s of budgets" in proc.stdout
    plan = dict(re.findall(r"^gpu_suite: plan: part (\w+) \(budget \d+ s\): (.+)$", proc.stdout,
                           flags=re.M))  # fmt: skip
    assert "--steps 20 " in plan["graphs"]
    peers = plan["peers"].split()  # a warm-up and 3 timed epochs per pair need few images here
    assert int(peers[peers.index("--train-images") + 1]) <= 4096
    assert int(peers[peers.index("--budget") + 1]) == budgets["peers"] - 30


def test_graphs_check_compares_the_logged_losses():
    """benchmarks/graphs_check.py's verdict: equal series agree; a loss off by more than rtol, a
    NaN, other logged steps or an empty eager run are named."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from graphs_check import compare

    eager = {1: 4.0, 2: 3.5, 3: 3.0}
    assert compare(dict(eager), eager, 0.0) is None
    assert compare({1: 4.0, 2: 3.5 * 1.01, 3: 3.0}, eager, 0.02) is None
    assert compare({1: 4.0, 2: 3.5 * 1.05, 3: 3.0}, eager, 0.02).startswith("step 2: loss")
    assert compare({1: 4.0, 2: float("nan"), 3: 3.0}, eager, 0.02).startswith("step 2")
    assert compare({1: 4.0, 2: 3.5}, eager, 0.02).startswith("logged steps differ")
    assert compare({}, {}, 0.02) == "the eager run logged no step"


def test_graphs_check_compares_the_final_state(tmp_path):
    """graphs_check's state verdict: the same checkpoints agree; a model tensor moved by more
    than the tolerance, a missing queue entry or a changed integer buffer are named."""
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from graphs_check import state_gap

    w, n = torch.ones(4, 3), torch.tensor(7)
    base = {"model": {"w": w, "n": n}, "queue": {"keys": torch.ones(8)}}
    cases = {
        "same": (base, None),
        "moved": ({**base, "model": {"w": w * 1.05, "n": n}}, "model.w: relative difference"),
        "int": ({**base, "model": {"w": w, "n": n + 1}}, "model.n: differs"),
        "missing": ({**base, "queue": {}}, "queue.keys: missing"),
    }  # fmt: skip
    torch.save(base, tmp_path / "eager.pt")
    for name, (ckpt, want) in cases.items():
        torch.save(ckpt, tmp_path / f"{name}.pt")
        got = state_gap(tmp_path / f"{name}.pt", tmp_path / "eager.pt", 0.02)
        assert (got is None) if want is None else (got or "").startswith(want), (name, got)
    small = {**base, "model": {"w": w * 1.01, "n": n}}
    torch.save(small, tmp_path / "small.pt")
    assert state_gap(tmp_path / "small.pt", tmp_path / "eager.pt", 0.02) is None


BAD_USAGE = [["--budget", "ocsvm=0"], ["--budget", "nope=5"], ["--parts", "step,nope"], ["-x"],
             ["--total", "0"], ["--device", "gpu"]]  # fmt: skip


@pytest.mark.parametrize("args", BAD_USAGE)
def test_bad_usage_exits_2_before_running_anything(tmp_path, args):
    results, report = tmp_path / "results.md", tmp_path / "rep"
    proc = suite("--quick", "--results", str(results), "--report", str(report), *args)
    assert proc.returncode == 2 and not results.exists() and not report.exists(), proc.stdout


def test_the_gpu_busy_time_is_the_union_of_the_device_intervals():
    """profile_step's GPU-busy time: overlapping kernels (two streams) count once, gaps not at
    all; re-derived here by marking every microsecond of a grid."""
    from benchmarks.profile_step import union_us

    spans = [(0.0, 10.0), (5.0, 12.0), (20.0, 25.0), (21.0, 22.0), (30.0, 30.0)]
    grid = sum(any(a <= t < b for a, b in spans) for t in range(40))
    assert union_us(spans) == grid == 17
    assert union_us([]) == 0.0


def test_the_ocsvm_fit_split_times_the_fits_own_kernel_matrix():
    """benchmarks/ocsvm.py's fit split: the device loop's kernel matrix is the RBF kernel of the
    points (numpy, in float64, to float32 rounding: the libsvm solver's rows); the host loop has
    none apart (rows on demand); the solve is the fit less the kernel matrix."""
    import numpy as np

    from benchmarks import ocsvm

    X = torch.randn(64, 8, generator=torch.Generator().manual_seed(0))
    Q = ocsvm.Torch("cpu", loop="device").kernel(X)
    x = X.double().numpy()
    ref = np.exp(-ocsvm.GAMMA * ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    np.testing.assert_allclose(Q.double().numpy(), ref, rtol=1e-6, atol=1e-7)
    assert ocsvm.Torch("cpu").kernel(X) is None and not ocsvm.splits(ocsvm.Torch("cpu"), X)
    times = {("t", "fit"): [5.0, 4.0, 6.0], ("t", "kernel"): [1.0, 1.5, 0.5],
             ("t", ocsvm.SPLIT_QUEUE): [2.0, 2.0, 3.0]}  # fmt: skip
    row = ocsvm.split_row("clustered", 64, "torch (x)", "device", times, "t")
    assert row == "| clustered | 64 | torch (x) | device | 1.000 | 4.000 | 5.000 | 2.000 |"
    times[("t", "kernel")] = []
    host = ocsvm.split_row("clustered", 64, "torch (cpu)", "host", times, "t")
    assert "| in the solve (rows on demand) | 5.000 | 5.000 |" in host


def test_train_capture_both_runs_each_moco_run_captured_and_eager_in_alternating_order():
    from benchmarks import train

    todo = train.plan(["moco_resident", "mioc_resident", "moco_loader"], "both")
    order = ["moco_resident graphs", "moco_resident eager", "mioc_resident", "moco_loader eager",
             "moco_loader graphs"]  # fmt: skip
    assert [t[0] for t in todo] == order
    flags = {t[0]: [o for o in t[2] if o.startswith("train.cuda_graphs=")] for t in todo}
    assert flags["moco_resident graphs"] == flags["moco_loader graphs"] == [
        "train.cuda_graphs=on"]  # fmt: skip
    assert flags["mioc_resident"] == []  # MiOC is not capturable: eager, as configured
    assert all(t[3] == train.RUNS[t[0].split()[0]][2] for t in todo)  # each its run's share
    results = [("c", [], {"name": "moco_resident graphs", "rows": [
                   {"epoch_s": 1.0, "images_per_s": 90.0, "data_wait": 0.1, "knn": 1.0}] * 3,
                   "paths": []}),
               ("c", [], {"name": "moco_resident eager", "rows": [
                   {"epoch_s": 1.0, "images_per_s": 60.0, "data_wait": 0.1, "knn": 1.0}] * 3,
                   "paths": []})]  # fmt: skip
    assert train.capture_ratios(results) == [
        "", "- moco_resident: captured / eager images/s = 1.50x (90 / 60)"]  # fmt: skip


def test_train_refuses_capture_on_a_cpu_with_a_documented_message():
    from tests.helpers.troubleshooting_quotes import assert_documented

    proc = subprocess.run([sys.executable, "benchmarks/train.py", "--device", "cpu", "--capture",
                           "both", "--no-record"], capture_output=True, text=True, cwd=ROOT,
                          env=clean_env(CUDA_VISIBLE_DEVICES=""), timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    message = proc.stderr.strip().splitlines()[-1].removeprefix("train.py: error: ")
    assert message == "--capture both: CUDA graphs need CUDA (the device is cpu)"
    assert_documented(message, "`benchmarks/host_overhead.py`, `peers.py` and `train.py`")


def test_train_reports_a_steady_figure_only_after_two_epochs_past_the_warm_up():
    """images/s and epoch s are medians over the epochs after the first (warm-up excluded), and
    only with two of them; with fewer the summary says so instead of quoting the warm-up epoch."""
    from benchmarks import train

    def run(*ips: float) -> dict:
        rows = [{"epoch_s": 50000 / x, "images_per_s": x, "data_wait": 0.1, "knn": 1.0}
                for x in ips]  # fmt: skip
        return {"name": "r", "rows": rows, "paths": []}

    for short in (run(), run(100.0), run(100.0, 300.0)):
        assert train.run_summary(short)[:2] == ("-", "-")
        n = max(0, len(short["rows"]) - 1)
        assert train.steady_note(short) == f"no steady figure: only {n} epochs after warm-up"
    steady = run(100.0, 300.0, 500.0)  # the warm-up epoch (100) is left out
    assert train.steady_note(steady) == ""
    assert train.run_summary(steady)[1] == "400"
    assert train.run_summary(steady)[0] == f"{(50000 / 300 + 50000 / 500) / 2:.1f}"
