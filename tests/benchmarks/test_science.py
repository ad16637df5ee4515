"""The CIFAR-10 comparison (benchmarks/science.py): its --quick mode runs three digits arms side by
side to the end, evaluates and packs them, and the pack is ingested into a scratch copy of the
results; the budget decision drops the last arms that cannot finish (made-up epoch times); the
lease plan (benchmarks/gpu_lease.sh --dry-run) fits a 900-second lease of 600-second commands,
and when the suite runs first and no science fits after it, the lease runs the suite's parts that
its trimmed run cuts or does not reach."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile

import numpy as np
import pytest

from tests.helpers.paths import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import gen_results  # noqa: E402

from benchmarks import science_plan as plan  # noqa: E402

pytestmark = pytest.mark.early  # the --quick run is about a minute on 2 cores (tests/conftest.py)


def page_rows(page: str) -> list[list[str]]:
    return [[c.strip() for c in re.split(r"(?<!\\)\|", s)[1:-1]]
            for s in page.splitlines() if s.startswith("| `")]  # fmt: skip


def test_quick_runs_three_arms_to_the_end_and_its_pack_is_ingested(tmp_path):
    out = tmp_path / "sci"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "benchmarks/science.py", "--quick", "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    status = json.loads((out / "status.json").read_text())
    assert status["done"] and status["plan"]["decided"]
    names = ["digits_moco_s0", "digits_mioc_s0", "digits_mioc_queue_s0"]
    assert list(status["runs"]) == names
    assert {r["state"] for r in status["runs"].values()} == {"finished"}
    assert (out / "results.md").is_file()  # --quick records beside its runs, not in RESULTS.md

    unpacked = tmp_path / "unpacked"
    with tarfile.open(out / "science.tar.gz") as tar:
        assert not [m for m in tar.getnames() if "checkpoints" in m or m.endswith(".pt")]
        tar.extractall(unpacked, filter="data")
    evals = {n: json.loads((unpacked / "science" / n / "eval" / "linear_eval.json").read_text())
             for n in names}  # fmt: skip
    table = (out / "science.md").read_text()
    for n, ev in evals.items():  # the printed table is the evaluations'
        assert (
            f"| {n} | 2 | " in table
            and f"| {ev['knn_top1']:.2f} | {ev['linear_top1']:.2f} |" in table
        )
    bits = [np.array([c == "1" for c in evals[n]["per_sample"]["linear_top1"]]) for n in names[1:]]
    point = 100 * (bits[0].mean() - bits[1].mean())  # MiOC - ablation over the same test images
    assert f"linear_top1: mioc - mioc_queue = {point:+.2f} [" in table

    scratch = tmp_path / "repo"  # a scratch copy of the results: the repository's stays as it is
    shutil.copytree(ROOT / "docs" / "results", scratch / "docs" / "results")
    shutil.copy(ROOT / "docs" / "results.md", scratch / "docs" / "results.md")
    shutil.copy(ROOT / "README.md", scratch / "README.md")
    page_before = gen_results.PAGE.read_text()
    for n in names:
        assert gen_results.main(["--root", str(scratch), "--keep", str(unpacked / "science" / n),
                                 f"quick_{n}"]) == 0  # fmt: skip
    assert gen_results.main(["--root", str(scratch)]) == 0
    assert gen_results.PAGE == ROOT / "docs" / "results.md"  # put back after the call
    assert gen_results.PAGE.read_text() == page_before
    rows = page_rows((scratch / "docs" / "results.md").read_text())
    for n, recipe in zip(names, ("digits_moco.yaml", "digits_mioc.yaml", "digits_mioc.yaml")):
        (row,) = [r for r in rows if f"[quick_{n}]" in r[11]]
        assert row[0].startswith(f"`{recipe}`") and "model.width=8" in row[0]
        assert row[4] == f"{evals[n]['knn_top1']:.2f} (1 seed)"
        assert row[5] == f"{evals[n]['linear_top1']:.2f} (1 seed)"


def test_an_arm_that_cannot_finish_is_dropped_with_the_seconds_it_would_need():
    """Made-up epoch times: the last arm goes first, one at a time, the others re-measured."""
    budget, eval_s = 600.0, 60.0
    live = [plan.Timing("moco", 2, 100, 5.0), plan.Timing("mioc", 2, 100, 6.0),
            plan.Timing("mioc_queue", 2, 100, 6.0)]  # fmt: skip
    assert plan.decide(live, 20.0, budget, eval_s) == {"mioc_queue": 20 + 98 * 6.0 + 60}
    assert plan.not_run(668.0, budget) == "not run: would need 668 s"
    # just after the drop the survivors are not re-measured: nothing is decided
    waiting = [plan.Timing("moco", 3, 100, None), plan.Timing("mioc", 3, 100, 5.5)]
    assert plan.decide(waiting, 30.0, budget, eval_s) == {}
    faster = [plan.Timing("moco", 4, 100, 4.5), plan.Timing("mioc", 4, 100, 5.5)]
    assert plan.decide(faster, 40.0, budget, eval_s) == {"mioc": 40 + 96 * 5.5 + 60}
    alone = [plan.Timing("moco", 6, 100, 4.0)]
    assert plan.decide(alone, 50.0, budget, eval_s) == {}  # 50 + 94 * 4 + 60 = 486 s: it stays
    # the first arm is the late one: the last still makes room for it (its own need fits)
    first_late = [plan.Timing("moco", 2, 100, 7.0), plan.Timing("mioc", 2, 100, 4.0)]
    assert plan.decide(first_late, 20.0, budget, eval_s) == {"mioc": 20 + 98 * 4.0 + 60}
    assert plan.not_run(472.0, budget).startswith("not run: would need 472 s beside the runs")
    never = [plan.Timing("moco", 2, 200, 5.0)]
    assert plan.decide(never, 20.0, budget, eval_s) == {"moco": 20 + 198 * 5.0 + 60}


def test_plan_from_picks_the_longest_schedule_that_fits():
    text = "\n".join([
        "## Training runs (CIFAR-10 recipes), 2026-11-28T06:53:10", "",
        "| moco_resident | 1 | 6.2 | 14592 | 4 % | 34.58 |", "",
        "## Science: CIFAR-10 arms side by side, 2026-12-01T10:00:00", "",
        "| moco_s0 | 100 | 512 s | 9000 | 80.00 | 82.00 |",
        "| mioc_s0 | 100 | not run: would need 700 s | - | - | - |",
    ])  # fmt: skip
    assert plan.newest_speed(text) == (
        9000.0,
        "Science: CIFAR-10 arms side by side, 2026-12-01T10:00:00",
    )
    assert plan.newest_speed(text.split("## Science")[0]) == (
        14592.0, "Training runs (CIFAR-10 recipes), 2026-11-28T06:53:10")  # fmt: skip
    assert plan.newest_speed("nothing here") is None

    def alone(ips: float, epochs: int, eval_s: float) -> float:  # steps + monitor, by hand
        return 30 + epochs * (50_000 / ips + (50_000 + 10_000) / 3 / ips) + eval_s

    for ips, budget in ((14592.0, 655.0), (40000.0, 655.0), (14592.0, 335.0), (30000.0, 600.0)):
        want = next((n for n in (200, 100) if alone(ips, n, 90.0) <= budget), None)
        assert plan.plan_epochs(ips, budget, 90.0) == want
    assert (
        plan.plan_epochs(40000.0, 655.0, 90.0) == 200 and plan.plan_epochs(14592, 335, 90) is None
    )


def lease(*args: str, **more: str) -> str:
    env = {**os.environ, "SCIENCE_ARMS": "moco,mioc,mioc_queue", "PYTHON": sys.executable,
           "PYTHONPATH": str(ROOT), **more}  # fmt: skip
    done = subprocess.run(["bash", "benchmarks/gpu_lease.sh", "--dry-run", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("branch", ["--science-first", "--suite-first"])
def test_the_lease_plan_fits_one_lease(branch):
    text = lease(branch)
    timeouts = [int(t) for t in re.findall(r"\(timeout_s (\d+)", text)]
    assert timeouts and all(0 < t <= 600 for t in timeouts)
    start = int(re.search(r"machine start (\d+) s", text).group(1))
    assert 120 <= start <= 180  # the machine's start: 2-3 min of the lease
    total = int(re.search(r"= (\d+) s of 900 s", text).group(1))
    assert total == start + sum(timeouts) <= 900
    if branch == "--science-first":
        assert "gpu_lease.sh start" in text and "gpu_lease.sh finish" in text
        budget = int(re.search(r"= (\d+) s\n", text.split("science budget:")[1]).group(1))
        assert f"start {budget}" in text and "science: epochs: 100 epochs" in text
    else:
        assert "gpu_suite.sh --report $OUT/gpu --total 300" in text
        assert "not in this lease" in text or "gpu_lease.sh start" in text


def test_the_lease_rule_is_checked_against_the_suites_record():
    text = lease()
    (rule,) = [s for s in text.splitlines() if s.startswith("lease rule:")]
    record = re.findall(r"GPU suite run of commit ([0-9a-f]{7,40})",
                        (ROOT / "benchmarks" / "RESULTS.md").read_text())[-1]  # fmt: skip
    assert record in rule
    paths = ["pretrain", "negatives", "negmine_core", "linear_eval", "benchmarks/gpu_suite.sh",
             ":(exclude)*.md"]  # fmt: skip

    def git(*args: str) -> int:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True).returncode

    if git("cat-file", "-e", f"{record}^{{commit}}"):  # a shallow clone: the record is unknown
        assert "unknown here: run the suite first" in rule
        return
    same = git("diff", "--quiet", record, "HEAD", "--", *paths) == 0
    clean = git("diff", "--quiet", "HEAD", "--", *paths) == 0
    assert ("run the science plan first" in rule) == (same and clean)
    assert ("run the suite first" in rule) == (not (same and clean))


def speed_file(tmp_path, images_per_s: int):
    """A results file whose newest cifar10_moco resident speed is ``images_per_s``."""
    path = tmp_path / f"speed_{images_per_s}.md"
    path.write_text(f"## made up\n\n| moco_resident | 1 | 6.2 | {images_per_s} | 4 % | 34.58 |\n")
    return path


def suite_plan(*args: str) -> tuple[list[tuple[str, int]], int, int]:
    """gpu_suite.sh's CUDA plan: its parts in order with their budgets, its own seconds and its kill
    margin (the dry run's accounting line, checked against the script's header)."""
    cmd = ["bash", "benchmarks/gpu_suite.sh", "--dry-run", "--device", "cuda", *args]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    parts = [(p, int(b)) for p, b in re.findall(r"^gpu_suite: plan: part (\w+) \(budget (\d+) s\)",
                                                done.stdout, flags=re.M)]  # fmt: skip
    own, kill = map(int, re.search(r"the suite's own (\d+) s and a (\d+) s kill margin",
                                   done.stdout).groups())  # fmt: skip
    header = (ROOT / "benchmarks" / "gpu_suite.sh").read_text().split("\nset -u")[0]
    header = re.sub(r"\n#\s*", " ", header)  # the comment as one line
    documented = re.search(r"the suite's own ~(\d+) s and the (\d+) s kill margin", header)
    assert documented and tuple(map(int, documented.groups())) == (own, kill)
    return parts, own, kill


def whole_parts(parts: list[tuple[str, int]], own: int, kill: int, total: int) -> list[str]:
    """The parts that run their whole budget under --total when each part before them runs its
    own: gpu_suite.sh's run_part by hand (a part gets what is left of the total less the kill
    margin, and none with under 5 s left)."""
    elapsed, whole = own, []
    for part, budget in parts:
        left = total - elapsed - kill
        if left < 5:
            break
        given = min(budget, left)
        if given == budget:
            whole.append(part)
        elapsed += given
    return whole


def test_with_no_science_after_the_suite_the_lease_runs_the_suites_cut_parts(tmp_path):
    slow = speed_file(tmp_path, 5000)
    assert plan.plan_epochs(5000, 335, 90) is None  # no schedule fits what the suite leaves
    text = lease("--suite-first", SCIENCE_PLAN_FROM=str(slow))
    assert "not in this lease" in text and "gpu_lease.sh start" not in text
    (suite,) = re.findall(r"^command 0 \(timeout_s (\d+)\): .*gpu_suite\.sh .* --total (\d+)$",
                          text, flags=re.M)  # fmt: skip
    suite_s, suite_total = map(int, suite)
    (rest,) = re.findall(r"^command 1 \(timeout_s (\d+)\): \. \.gpu/setup\.sh && bash benchmarks/"
                         r"gpu_suite\.sh --report \$OUT/gpu2 --parts (\S+) --total (\d+)$",
                         text, flags=re.M)  # fmt: skip
    rest_s, rest_parts, rest_total = int(rest[0]), rest[1].split(","), int(rest[2])
    parts, own, kill = suite_plan("--total", str(suite_total))
    whole = whole_parts(parts, own, kill, suite_total)
    cut = [p for p, _ in parts if p not in whole]
    assert rest_parts == cut and cut  # in the suite's order
    assert whole == [p for p, _ in parts][: len(whole)]  # the trimmed run's whole parts come first
    assert rest_s - rest_total == suite_s - suite_total > 0  # the set-up's margin, as command 0's
    start = int(re.search(r"machine start (\d+) s", text).group(1))
    total = int(re.search(r"= (\d+) s of 900 s", text).group(1))
    assert total == start + suite_s + rest_s <= 900 and rest_s <= 600
    assert 900 - total < 30  # the rest of the lease, not a part of it
    rest_plan, _, _ = suite_plan("--parts", rest[1], "--total", str(rest_total))
    assert whole_parts(rest_plan, own, kill, rest_total) == cut  # each runs its whole budget


def test_with_science_after_the_suite_the_lease_runs_no_rest_of_the_suite(tmp_path):
    fast = speed_file(tmp_path, 60000)
    assert plan.plan_epochs(60000, 335, 90) == 100
    text = lease("--suite-first", SCIENCE_PLAN_FROM=str(fast))
    assert "gpu_lease.sh start 335" in text and "gpu_lease.sh finish" in text
    assert "--parts" not in text and "$OUT/gpu2" not in text
    assert f"SCIENCE_PLAN_FROM={fast} bash benchmarks/gpu_lease.sh start" in text
    assert "science: epochs: 100 epochs: one run alone at 60000 images/s (made up)" in text
