"""The CIFAR-10 comparison at full length: MoCo, MoCo with the symmetric loss, MiOC and MiOC's
ablation, run side by side on one GPU within a time budget, each evaluated and kept.

    python benchmarks/science.py --data-root /tmp/data/cifar10 --budget 590 --out /tmp/science
    python benchmarks/science.py --plan-from benchmarks/RESULTS.md --budget 590 --dry-run
    python benchmarks/science.py --quick --out /tmp/sci          # digits, 3 arms, a CPU (tests)

Each arm of ``--arms`` (``benchmarks/science_plan.py`` ``ARMS``: arm -> recipe + overrides) and
seed of ``--seeds`` is one ``python -m pretrain --cfg RECIPE ... out_dir=OUT/NAME`` process; all
start at once on the one GPU (a step keeps it about 30 % busy, so the runs overlap). The CIFAR-10
JPEG folder (``--data-root``) is read as ``data.name=imagefolder`` with ``data.resident=device``.
Every run's ``metrics.jsonl`` is read as it grows: its first epoch is timed, then each run's
epoch time while all run, and when the estimates do not all fit in ``--budget`` seconds the last
runs of the order are stopped (SIGTERM to the process group) one at a time, the others re-measured
in between (``science_plan.decide``). A run is never shortened: one that cannot finish is stopped
and reported "not run: would need N s". ``--epochs N`` (``train.epochs=N``, the cosine ending
there) is a complete shorter run, labelled by its epochs; ``--plan-from RESULTS`` picks the
longest schedule (200, else 100) that one run alone fits at the newest measured speed.

After each run: its kNN monitor curve (``metrics.jsonl``), then ``python -m linear_eval --ckpt
RUN/checkpoints/last.pt`` (weighted kNN k 200, T 0.1, and the SGD linear probe with MoCo's
schedule, lr 30, 100 epochs, x0.1 at 60/80, on cached features: the results table's protocol),
which keeps each test image's result (``per_sample``) for the paired bootstrap of MiOC minus its
ablation. At the end: OUT/science.tar.gz holds each finished run as ``scripts/gen_results.py
--keep`` reads it (config.yaml, metrics.jsonl, provenance.json, eval/*.json, paths relative, no
checkpoint), with the status and the table; the table (arm, epochs, wall time, images/s, kNN,
linear top-1) is printed and appended to ``--results`` (benchmarks/RESULTS.md; with ``--quick``
OUT/results.md) with the machine, date and commit. ``--status FILE`` (default OUT/status.json)
is rewritten as it goes: per run its state (starting, running, evaluating, finished, dropped,
failed), epoch and estimated seconds to finish, the plan once decided, and ``done`` at the end.

Where the copy has no ``.git`` (a GPU machine), ``NEGMINE_COMMIT`` (and ``NEGMINE_DIRTY=1``) name
the code's commit in the kept provenance. Exit status: 0 when every run that started finished or
was dropped for time, 1 if one failed, 2 on bad arguments (checked before anything starts).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
import results_logs  # noqa: E402

from benchmarks import science_plan as plan  # noqa: E402
from benchmarks.train import read_log  # noqa: E402

BUNDLE = "/tmp/data/cifar10"  # where .gpu/setup.sh unpacks the CIFAR-10 JPEGs
CIFAR = ["data.name=imagefolder", "data.resident=device", "train.log_every=20"]
#: --quick: digits, a width-8 model, 2 epochs of 5 steps, one thread per run; a 20-epoch probe.
QUICK = ["model.width=8", "train.epochs=2", "train.batch_size=256", "moco.queue_size=256",
         "train.threads=1", "train.log_every=5", "eval.knn_every=1"]  # fmt: skip
QUICK_MIOC = ["negatives.kwargs.num_synthetic=16", "negatives.kwargs.num_inlier_synthetic=8",
              "negatives.kwargs.warmup_epochs=1"]  # fmt: skip
QUICK_EVAL = ["--epochs", "20", "--milestones", "12", "16"]
PACK_LIMIT = 16 * 2**20  # what a report folder brings back per file
STOP_GRACE_S = 30.0  # after SIGTERM: the trainer's checkpoint, then the process leaves


class UsageError(Exception):
    """A bad argument: exit status 2, before anything starts."""


@dataclass
class Run:
    name: str
    arm: str
    seed: int
    cmd: list[str]
    out: Path
    epochs: int
    state: str = "starting"
    proc: subprocess.Popen | None = None
    seen: list[float] = field(default_factory=list)  # when each epoch record was first seen
    since: float = 0.0  # the last change of the runs beside it: gaps after it are re-measured
    need: float | None = None
    note: str = ""
    started: float = 0.0

    def epoch_s(self, measured_only: bool) -> float | None:
        """Median of the last three gaps between epoch records (after ``since`` if asked)."""
        pairs = zip(self.seen, self.seen[1:])
        gaps = [b - a for a, b in pairs if a >= self.since or not measured_only]
        return statistics.median(gaps[-3:]) if gaps else None


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arms", default="", help="comma list of arms, in priority order (default: "
                   f"{','.join(plan.ARMS)}; with --quick {','.join(plan.QUICK_ARMS)})")  # fmt: skip
    p.add_argument("--seeds", default="0", help="comma list of seeds")
    p.add_argument("--epochs", type=int, default=None, help="train.epochs (default: the recipe's)")
    p.add_argument("--plan-from", default="", metavar="RESULTS",
                   help="pick the epochs (200, else 100) from the newest speed there")  # fmt: skip
    p.add_argument("--budget", type=float, default=590.0, help="seconds for everything")
    p.add_argument("--eval-s", type=float, default=None,
                   help="seconds allowed for one evaluation (default 90; --quick 30)")  # fmt: skip
    p.add_argument("--data-root", default=BUNDLE, help="the CIFAR-10 JPEG folder")
    p.add_argument("--set", nargs="*", default=[], metavar="key=value", help="more overrides")
    p.add_argument("--probe", choices=("features", "images"), default="features",
                   help="linear_eval's probe (features: the results table's)")  # fmt: skip
    p.add_argument("--out", default="runs/science", help="the runs' folder")
    p.add_argument("--status", default="", help="status JSON (default OUT/status.json)")
    p.add_argument("--results", default="", help="results file to append the table to "
                   "(default benchmarks/RESULTS.md; with --quick OUT/results.md)")  # fmt: skip
    p.add_argument("--no-record", action="store_true", help="print the table only")
    p.add_argument("--poll", type=float, default=1.0, help="seconds between reads of the logs")
    p.add_argument("--quick", action="store_true", help="digits, tiny settings, a CPU")
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    return p.parse_args(argv)


def arms_of(a: argparse.Namespace) -> dict[str, tuple[str, tuple[str, ...]]]:
    table = plan.QUICK_ARMS if a.quick else plan.ARMS
    names = [n for n in a.arms.split(",") if n] or list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        raise UsageError(f"--arms: unknown arm {', '.join(unknown)} (arms: {', '.join(table)})")
    return {n: table[n] for n in names}


def seeds_of(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s]
    except ValueError:
        raise UsageError(f"--seeds {text}: want a comma list of whole numbers") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds {text}: want one or more different seeds")
    return seeds


def choose_epochs(a: argparse.Namespace, eval_s: float) -> tuple[int | None, str]:
    """(train.epochs or None for the recipe's, why)."""
    if a.epochs is not None and a.plan_from:
        raise UsageError("--epochs and --plan-from: give one")
    if a.epochs is not None:
        if a.epochs < 1:
            raise UsageError(f"--epochs {a.epochs}: want a whole number >= 1")
        return a.epochs, "--epochs"
    if not a.plan_from:
        return None, "the recipe's"
    path = Path(a.plan_from)
    if not path.is_file():
        raise UsageError(f"--plan-from {path}: no such file")
    found = plan.newest_speed(path.read_text())
    if found is None:
        raise UsageError(f"--plan-from {path}: no cifar10_moco resident images/s recorded there")
    ips, title = found
    n = plan.plan_epochs(ips, a.budget, eval_s)
    shortest = min(plan.SCHEDULES)
    if n is None:
        need = plan.SETUP_S + shortest * plan.epoch_s(ips) + eval_s
        return 0, (f"no schedule fits: {shortest} epochs at {ips:.0f} images/s ({title}) "
                   f"need {need:.0f} s of {a.budget:.0f} s")  # fmt: skip
    need = plan.SETUP_S + n * plan.epoch_s(ips) + eval_s
    return n, (f"{n} epochs: one run alone at {ips:.0f} images/s ({title}) needs "
               f"{need:.0f} s of {a.budget:.0f} s")  # fmt: skip


def build_runs(a: argparse.Namespace, epochs: int | None, out: Path) -> list[Run]:
    """Every (seed, arm) run in priority order (each seed's arms before the next seed's); the
    configs loaded here, so that a bad recipe or override stops everything before it starts."""
    from pretrain import config

    runs = []
    for seed in seeds_of(a.seeds):
        for arm, (recipe, over) in arms_of(a).items():
            if not (config.CONFIG_DIR / recipe).is_file():
                raise UsageError(f"arm {arm}: recipe {recipe} is not shipped (pretrain/configs/); "
                                 "leave the arm out with --arms")  # fmt: skip
            sets = [*over]
            if a.quick:
                sets += QUICK + (QUICK_MIOC if "mioc" in recipe else [])
            else:
                sets += [*CIFAR, f"data.root={a.data_root}"]
            if epochs:
                sets.append(f"train.epochs={epochs}")
            sets += [*a.set, f"seed={seed}", "train.progress_bar=false"]
            try:
                cfg = config.load(recipe, sets)
            except Exception as e:  # noqa: BLE001  (the config's own message names the key)
                raise UsageError(f"arm {arm}: {e}") from None
            stem = recipe.split("_", 1)[0]
            name = f"{stem}_{arm}" + (f"_e{epochs}" if epochs else "") + f"_s{seed}"
            cmd = [sys.executable, "-m", "pretrain", "--cfg", recipe, *sets,
                   f"out_dir={out / name}"]  # fmt: skip
            runs.append(Run(name, arm, seed, cmd, out / name, cfg.train.epochs))
    return runs


class Science:
    """The runs, their processes and the status file."""

    def __init__(self, a: argparse.Namespace, runs: list[Run], status: Path, why: str) -> None:
        self.a, self.runs, self.status_path, self.why = a, runs, status, why
        self.eval_s = a.eval_s if a.eval_s is not None else (30.0 if a.quick else 90.0)
        self.t0 = time.monotonic()
        self.decided = False
        self.stop_asked = ""
        self.evals: dict[str, subprocess.Popen] = {}
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1",
                    "NEGMINE_CACHE_DIR": str(status.parent / "cache")}  # fmt: skip

    def now(self) -> float:
        return time.monotonic() - self.t0

    def start(self) -> None:
        for r in self.runs:
            r.out.parent.mkdir(parents=True, exist_ok=True)
            with (r.out.parent / f"{r.name}.log").open("w") as log:
                r.proc = subprocess.Popen(r.cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                          cwd=ROOT, start_new_session=True)  # fmt: skip
            r.started = self.now()
            print(f"science: started {r.name}: {' '.join(r.cmd[1:])}", flush=True)

    def live(self) -> list[Run]:
        return [r for r in self.runs if r.state in ("starting", "running")]

    def timings(self) -> list[plan.Timing]:
        return [plan.Timing(r.name, len(r.seen), r.epochs, r.epoch_s(True)) for r in self.live()]

    def poll(self) -> None:
        now = self.now()
        for r in self.live():
            records = [x for x in read_log(r.out / "metrics.jsonl") if x.get("kind") == "epoch"]
            r.seen += [now] * (len(records) - len(r.seen))
            if r.seen:
                r.state = "running"
            assert r.proc is not None
            code = r.proc.poll()
            if code is None:
                continue
            if code == 0 and len(r.seen) >= r.epochs:
                self.evaluate(r)
            else:
                r.state, r.note = "failed", f"failed (exit {code}): see {r.name}.log"
                print(f"science: {r.name} {r.note}", flush=True)
        for name, proc in list(self.evals.items()):
            code = proc.poll()
            if code is None:
                continue
            r = next(x for x in self.runs if x.name == name)
            del self.evals[name]
            if code == 0:
                r.state, r.note = "finished", f"finished in {self.now():.0f} s"
            else:
                r.state, r.note = "failed", f"evaluation failed (exit {code}): see {name}.eval.log"
            print(f"science: {name} {r.note}", flush=True)

    def evaluate(self, r: Run) -> None:
        r.state = "evaluating"
        ckpt = str(r.out / "checkpoints" / "last.pt")
        cmd = [sys.executable, "-m", "linear_eval", "--ckpt", ckpt, "--probe", self.a.probe,
               *(QUICK_EVAL if self.a.quick else [])]  # fmt: skip
        env = {**self.env, "OMP_NUM_THREADS": "1"} if self.a.quick else self.env
        with (r.out.parent / f"{r.name}.eval.log").open("w") as log:
            self.evals[r.name] = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True
            )
        print(f"science: {r.name} trained {r.epochs} epochs in {self.now():.0f} s; evaluating",
              flush=True)  # fmt: skip

    def stop(self, r: Run, need: float | None, why: str = "") -> None:
        proc = self.evals.pop(r.name, None) or r.proc
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        r.state, r.need = "dropped", need
        r.note = why or plan.not_run(need, self.a.budget)
        print(f"science: {r.name} {r.note} (budget {self.a.budget:.0f} s)", flush=True)

    def step(self) -> None:
        """One look at the runs: the budget's end, else a drop when the estimates do not fit."""
        self.poll()
        now = self.now()
        if self.stop_asked or now >= self.a.budget:
            needs = plan.over_time(self.timings(), now, self.eval_s)
            for r in [*self.live(), *(x for x in self.runs if x.state == "evaluating")]:
                need = needs.get(r.name, now + self.eval_s)
                why = plan.not_run(need, self.a.budget)
                self.stop(r, need, f"{why} ({self.stop_asked})" if self.stop_asked else why)
            return
        drop = plan.decide(self.timings(), now, self.a.budget, self.eval_s)
        for name, need in drop.items():
            self.stop(next(r for r in self.runs if r.name == name), need)
            for r in self.live():  # the others speed up: re-measure them before deciding again
                r.since = now
        timings = self.timings()
        if not self.decided and not drop and timings and all(t.epoch_s for t in timings):
            self.decided = True
            print(f"science: plan: {self.plan_line()}", flush=True)

    def plan_line(self) -> str:
        keep = [r.name for r in self.runs if r.state != "dropped"]
        gone = [f"{r.name} ({r.note})" for r in self.runs if r.state == "dropped"]
        line = f"keep {', '.join(keep) or 'none'}"
        return line + (f"; dropped {', '.join(gone)}" if gone else "")

    def write_status(self, done: bool = False, pack: str = "") -> None:
        now = self.now()
        runs = {}
        for r in self.runs:
            est = r.epoch_s(False)
            left = None
            if r.state in ("starting", "running") and est is not None:
                left = round((r.epochs - len(r.seen)) * est + self.eval_s, 1)
            runs[r.name] = {"arm": r.arm, "seed": r.seed, "state": r.state, "epoch": len(r.seen),
                            "epochs": r.epochs, "epoch_s": None if est is None else round(est, 2),
                            "finish_in_s": left,
                            "need_s": None if r.need is None else round(r.need),
                            "note": r.note}  # fmt: skip
        status = {"budget_s": self.a.budget, "elapsed_s": round(now, 1), "epochs_why": self.why,
                  "plan": {"decided": self.decided or done, "line": self.plan_line()},
                  "runs": runs, "done": done, "pack": pack}  # fmt: skip
        tmp = self.status_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(status, indent=1) + "\n")
        os.replace(tmp, self.status_path)

    def loop(self) -> None:
        while self.live() or self.evals:
            self.step()
            self.write_status()
            if self.live() or self.evals:
                time.sleep(self.a.poll)


def stamp_commit(prov_path: Path) -> None:
    """Name the code's commit from ``NEGMINE_COMMIT`` where the run recorded none (a copy
    without ``.git``); ``NEGMINE_DIRTY=1`` marks uncommitted changes."""
    commit = os.environ.get("NEGMINE_COMMIT", "")
    prov = json.loads(prov_path.read_text())
    if prov.get("commit") or not commit:
        return
    dirty = os.environ.get("NEGMINE_DIRTY") == "1"
    for rec in (prov, *prov.get("segments", [])):
        rec["commit"], rec["dirty"] = commit, dirty
    prov["commit_from"] = "NEGMINE_COMMIT (the copy that ran had no .git)"
    prov_path.write_text(json.dumps(prov, indent=1) + "\n")


def run_cells(r: Run) -> list[str]:
    """(arm, epochs, wall time, images/s, kNN, linear top-1) of one run."""
    if r.state != "finished":
        return [r.name, str(r.epochs), r.note, "-", "-", "-"]
    prov = json.loads((r.out / "provenance.json").read_text())
    ev = json.loads((r.out / "eval" / "linear_eval.json").read_text())
    rates = [s["images_per_s"] for s in read_log(r.out / "metrics.jsonl") if "images_per_s" in s]
    ips = f"{statistics.median(rates):.0f}" if rates else "-"
    return [r.name, str(r.epochs), f"{prov['wall_s']:.0f} s", ips, f"{ev['knn_top1']:.2f}",
            f"{ev['linear_top1']:.2f}"]  # fmt: skip


def curve(r: Run) -> str:
    """The run's own kNN monitor, epoch: top-1 (every tenth epoch and the last)."""
    epochs = [x for x in read_log(r.out / "metrics.jsonl") if x.get("kind") == "epoch"]
    pts = [e for e in epochs if "knn_top1" in e and (e["epoch"] % 10 == 0 or e is epochs[-1])]
    return ", ".join(f"{e['epoch']}: {e['knn_top1']:.2f}" for e in pts) or "-"


def paired(runs: list[Run]) -> list[str]:
    """MiOC minus its ablation per seed: the paired bootstrap over the test images."""
    from linear_eval.records import stats

    lines = []
    a, b = plan.PAIR
    for seed in sorted({r.seed for r in runs}):
        one = {r.arm: r for r in runs if r.seed == seed and r.state == "finished"}
        if a not in one or b not in one:
            continue
        ev = [json.loads((one[x].out / "eval" / "linear_eval.json").read_text()) for x in (a, b)]
        for key in ("knn_top1", "linear_top1"):
            bits = [[c == "1" for c in e["per_sample"][key]] for e in ev]
            d = stats.paired_difference_ci(bits[0], bits[1])
            lines.append(f"- seed {seed}, {key}: {a} - {b} = {d.point:+.2f} "
                         f"[{d.low:+.2f}, {d.high:+.2f}] (paired bootstrap, 1000 resamples of the "
                         "test images)")  # fmt: skip
    return lines


def pack(runs: list[Run], out: Path, table: list[str], status: Path) -> Path:
    """OUT/science.tar.gz: each finished run as gen_results --keep reads it (paths relative),
    the status and the table."""
    stage = out / "pack" / "science"
    for r in runs:
        if r.state == "finished":
            results_logs.keep(r.out, stage / r.name)
            stamp_commit(stage / r.name / "provenance.json")
    (stage / "science.md").parent.mkdir(parents=True, exist_ok=True)
    (stage / "science.md").write_text("\n".join(table) + "\n")
    (stage / "status.json").write_text(status.read_text())
    target = out / "science.tar.gz"
    with tarfile.open(target, "w:gz") as tar:
        tar.add(stage, arcname="science")
    if target.stat().st_size > PACK_LIMIT:
        raise RuntimeError(f"{target}: {target.stat().st_size} bytes, over the 16 MiB a report "
                           "folder brings back")  # fmt: skip
    return target


def report(sci: Science, commit: str) -> list[str]:
    lines = [f"{sci.why}; budget {sci.a.budget:.0f} s; commit {commit}; arms in priority order; "
             "kNN k 200, T 0.1 and the linear probe (python -m linear_eval, "
             f"--probe {sci.a.probe}) on the last checkpoint", "",
             "| arm | epochs | wall time | images/s | kNN top-1 | linear top-1 |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    lines += ["| " + " | ".join(run_cells(r)) + " |" for r in sci.runs]
    lines += ["", "kNN monitor (the recipe's own, head features) by epoch:", ""]
    lines += [f"- {r.name}: {curve(r)}" for r in sci.runs if r.state == "finished"]
    more = paired(sci.runs)
    if more:
        lines += ["", "MiOC minus its ablation (O = the whole queue):", "", *more]
    return lines


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    out = Path(a.out).resolve()
    status = Path(a.status).resolve() if a.status else out / "status.json"
    try:
        if a.budget <= 0 or a.poll <= 0:
            raise UsageError("--budget and --poll: want seconds > 0")
        eval_s = a.eval_s if a.eval_s is not None else (30.0 if a.quick else 90.0)
        epochs, why = choose_epochs(a, eval_s)
        if epochs == 0:
            print(f"science: {why}: nothing to run", flush=True)
            if not a.dry_run:
                status.parent.mkdir(parents=True, exist_ok=True)
                status.write_text(json.dumps({"budget_s": a.budget, "epochs_why": why, "runs": {},
                                              "plan": {"decided": True, "line": why},
                                              "done": True, "pack": ""}) + "\n")  # fmt: skip
            return 0
        runs = build_runs(a, epochs, out)
        if not a.quick and not a.dry_run and not Path(a.data_root, "train").is_dir():
            raise UsageError(f"--data-root {a.data_root}: no train/ folder (the CIFAR-10 JPEGs; "
                             "on a GPU machine, . .gpu/setup.sh unpacks them)")  # fmt: skip
    except UsageError as e:
        print(f"science: {e}", file=sys.stderr)
        return 2
    print(f"science: epochs: {why}; budget {a.budget:.0f} s; runs: "
          f"{', '.join(r.name for r in runs)}", flush=True)  # fmt: skip
    if a.dry_run:
        for r in runs:
            print("  " + " ".join(r.cmd[1:]))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    status.parent.mkdir(parents=True, exist_ok=True)
    sci = Science(a, runs, status, why)

    def asked(signum: int, _frame: Any) -> None:
        sci.stop_asked = f"stopped by signal {signum} at {sci.now():.0f} s"

    signal.signal(signal.SIGTERM, asked)
    sci.write_status()
    sci.start()
    sci.loop()
    sci.write_status()
    commit = os.environ.get("NEGMINE_COMMIT") or _git_commit()
    lines = report(sci, commit)
    target = pack(runs, out, lines, status)
    from benchmarks.results_md import record_table

    default = out / "results.md" if a.quick else ROOT / "benchmarks" / "RESULTS.md"
    results = a.results or str(default)
    device = "cpu" if a.quick else "cuda"
    title = f"Science: {'digits (--quick)' if a.quick else 'CIFAR-10'} arms side by side"
    record_table(title, lines, results, not a.no_record, device)
    (out / "science.md").write_text("\n".join(lines) + "\n")
    sci.write_status(done=True, pack=str(target))
    print(f"science: packed {target} ({target.stat().st_size} bytes)", flush=True)
    return 1 if any(r.state == "failed" for r in runs) else 0


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
