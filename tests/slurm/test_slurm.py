"""``python -m slurm``: bad input is refused before submitting; real jobs on a local SLURM."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm.submit import SlurmError, parse_time
from tests.helpers.paths import ROOT

pytestmark = pytest.mark.early  # among the suite's longest files: started first (tests/conftest.py)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("30", 30), ("1:30", 2), ("00:10:30", 11), ("72:00:00", 4320), ("1-12", 2160),
     ("2-1:30", 2970), ("1-00:00:01", 1441)],
)  # fmt: skip
def test_parse_time_follows_slurm_formats(text, minutes):
    assert parse_time(text) == minutes


@pytest.mark.parametrize("text", ["1:xx", "", "a-1", "1:2:3:4", "0"])
def test_parse_time_rejects_bad_input(text):
    with pytest.raises(SlurmError, match="--time"):
        parse_time(text)


def cli(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ}
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "slurm", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=env)  # fmt: skip


def fake_tools(tmp_path: Path, partitions: str) -> str:
    """A PATH with stand-ins for sbatch (must never run) and sinfo (lists partitions)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\ntouch {tmp_path}/SUBMITTED\nexit 1\n")
    (bin_dir / "sinfo").write_text(f"#!/bin/sh\nprintf '{partitions}\\n'\n")
    for tool in ("sbatch", "sinfo"):
        (bin_dir / tool).chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


def test_missing_sbatch_is_reported_before_submitting(tmp_path):
    out = cli("--cfg", "digits_moco.yaml", f"out_dir={tmp_path}", path="/nonexistent")
    assert out.returncode == 2
    assert "sbatch is not on PATH" in out.stderr and "nothing was submitted" in out.stderr


def test_unknown_partition_lists_the_real_ones(tmp_path):
    path = fake_tools(tmp_path, "debug*\\ngpu")
    out = cli("--cfg", "digits_moco.yaml", "--partition", "gpux", f"out_dir={tmp_path}", path=path)
    assert out.returncode == 2
    assert "unknown partition 'gpux'; this cluster has: debug, gpu" in out.stderr
    assert not (tmp_path / "SUBMITTED").exists()


def test_config_error_is_reported_before_submitting(tmp_path):
    path = fake_tools(tmp_path, "debug*")
    out = cli("--cfg", "digits_moco.yaml", "train.epoch=3", path=path)
    assert out.returncode == 2 and "closest valid key: 'train.epochs'" in out.stderr
    out = cli("--cfg", "digits_moco.yaml", "--sweep", "moco.temprature=0.5", path=path)
    assert out.returncode == 2 and "moco.temperature" in out.stderr
    assert not (tmp_path / "SUBMITTED").exists()


def test_eval_job_needs_an_existing_checkpoint(tmp_path):
    path = fake_tools(tmp_path, "debug*")
    out = cli("linear_eval", "--", "--ckpt", str(tmp_path / "nope.pt"), path=path)
    assert out.returncode == 2 and "does not exist" in out.stderr


def test_every_sweep_task_gets_its_own_run_directory(tmp_path, monkeypatch):
    """The default out_dir is relative (runs/<stem>): made absolute, it must still get sweep_<i>."""
    from slurm.__main__ import task_configs

    monkeypatch.chdir(tmp_path)
    for overrides in ([], ["out_dir=rel"], [f"out_dir={tmp_path / 'abs'}"]):
        tasks = task_configs(str(ROOT / "pretrain/configs/digits_moco.yaml"), overrides,
                             [["seed=1"], ["seed=2"]])  # fmt: skip
        dirs = [Path(c.out_dir) for c, _ in tasks]
        assert all(d.is_absolute() for d in dirs) and dirs[0] != dirs[1], dirs
        assert [d.name for d in dirs] == ["sweep_0", "sweep_1"]
        assert [f"out_dir={d}" in ov for (_, ov), d in zip(tasks, dirs)] == [True, True]
    own = task_configs(str(ROOT / "pretrain/configs/digits_moco.yaml"), [],
                       [["out_dir=a"], ["out_dir=b"]])  # fmt: skip
    assert [Path(c.out_dir) for c, _ in own] == [tmp_path / "a", tmp_path / "b"]


def test_the_docstring_sweep_example_gives_each_task_its_own_directory(tmp_path, monkeypatch):
    import shlex

    import slurm.__main__ as launcher

    monkeypatch.chdir(tmp_path)
    line = next(x for x in launcher.__doc__.splitlines() if "--sweep" in x)
    words = shlex.split(line)
    sweeps = [shlex.split(words[i + 1]) for i, w in enumerate(words) if w == "--sweep"]
    cfg = words[words.index("--cfg") + 1]
    dirs = {c.out_dir for c, _ in launcher.task_configs(cfg, [], sweeps)}
    assert len(sweeps) >= 2 and len(dirs) == len(sweeps)


def test_sweep_tasks_sharing_a_directory_are_refused(tmp_path):
    from tests.helpers.troubleshooting_quotes import assert_documented

    path = fake_tools(tmp_path, "debug*")
    out = cli("--cfg", "digits_moco.yaml", "--sweep", f"seed=1 out_dir={tmp_path}",
              "--sweep", f"seed=2 out_dir={tmp_path}", path=path)  # fmt: skip
    assert out.returncode == 2 and not (tmp_path / "SUBMITTED").exists()
    assert_documented(out.stderr.strip().removeprefix("error: "))


# --- against a real one-node SLURM (slurm/local_cluster.sh); skipped with the reason otherwise ---

TINY = ["model.width=8", "train.batch_size=32", "moco.queue_size=64", "data.num_workers=0",
        "train.progress_bar=false", "train.log_every=1", "eval.knn_every=1"]  # fmt: skip
DEADLINE_S = 300


@pytest.fixture(scope="module")
def cluster():
    """The run's shared cluster (started once per run, stopped by the top-level pytest process
    at the end of the session: tests/helpers/slurm_cluster.py)."""
    from tests.helpers.slurm_cluster import ensure_cluster

    env = ensure_cluster()
    if isinstance(env, str):
        pytest.skip(f"no local SLURM: {env}")
    return {**os.environ, **env}


def submit(env: dict, *args: str) -> list[int]:
    out = subprocess.run([sys.executable, "-m", "slurm", *args], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    ids = [int(line.split()[1]) for line in out.stdout.splitlines() if line.startswith("job:")]
    assert ids and "log folder:" in out.stdout and "follow: tail -f" in out.stdout
    return ids


def epoch_lines(run: Path) -> list[dict]:
    import json

    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    records = [json.loads(s) for s in path.read_text().splitlines() if s.strip()]
    return [r for r in records if r["kind"] == "epoch"]


def wait_done(env: dict, job_ids: list[int], runs: list[Path], epochs: int) -> None:
    """Until every run has its last epoch line and SLURM no longer lists the jobs."""
    import time

    from tests.helpers.slurm_cluster import Watch

    watch = Watch(env)  # fails within 60 s of the controller going away, with its logs
    deadline = time.time() + DEADLINE_S
    while time.time() < deadline:
        queued = watch.check()
        finished = all(len(epoch_lines(r)) >= epochs for r in runs)
        if finished and not any(str(j) in queued for j in job_ids):
            return
        time.sleep(1)
    logs = "\n".join(p.read_text()[-2000:] for r in runs for p in r.glob("../**/*_log.*"))
    raise AssertionError(f"jobs {job_ids} not done in {DEADLINE_S} s; logs:\n{logs}")


def test_training_job_runs_to_completion(cluster, tmp_path):
    run = tmp_path / "run"
    ids = submit(cluster, "--cfg", "digits_moco.yaml", "--time", "00:10:00", f"out_dir={run}",
                 "train.epochs=1", *TINY)  # fmt: skip
    wait_done(cluster, ids, [run], epochs=1)
    assert "knn_top1" in epoch_lines(run)[-1] and (run / "checkpoints" / "last.pt").exists()


def test_job_array_runs_every_override(cluster, tmp_path):
    ids = submit(cluster, "--cfg", "digits_moco.yaml", "--time", "00:10:00", f"out_dir={tmp_path}",
                 "train.epochs=1", *TINY, "--sweep", "seed=1", "--sweep", "seed=2")  # fmt: skip
    runs = [tmp_path / "sweep_0", tmp_path / "sweep_1"]
    wait_done(cluster, ids, runs, epochs=1)
    import yaml

    seeds = [yaml.safe_load((r / "config.yaml").read_text())["seed"] for r in runs]
    assert seeds == [1, 2]


def test_preempted_job_requeues_and_ends_like_an_uninterrupted_run(cluster, tmp_path):
    import time

    import torch

    common = ["train.epochs=2", "train.deterministic=true", *TINY]
    run = tmp_path / "preempted"
    (job,) = submit(cluster, "--cfg", "digits_moco.yaml", "--time", "00:30:00", f"out_dir={run}",
                    *common)  # fmt: skip
    from tests.helpers.slurm_cluster import Watch

    watch = Watch(cluster)
    deadline = time.time() + DEADLINE_S
    steps = 1437 // 32
    while time.time() < deadline:  # preempt once a few steps of epoch 2 are logged
        watch.check()
        m = run / "metrics.jsonl"
        if m.exists() and sum(1 for _ in m.open()) >= steps + 1 + 3:
            break
        time.sleep(0.2)
    subprocess.run(["scancel", "--signal=USR2", str(job)], check=True, env=cluster, timeout=30)
    wait_done(cluster, [job], [run], epochs=2)
    log = next((run / "slurm").glob(f"{job}_0_log.out")).read_text()
    assert "SIGUSR2: checkpoint saved" in log and "resuming at epoch 2" in log

    local = tmp_path / "local"
    done = subprocess.run([sys.executable, "-m", "pretrain", "--cfg", "digits_moco.yaml",
                           f"out_dir={local}", *common], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    a = torch.load(local / "checkpoints" / "last.pt", weights_only=True)
    b = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    for part in ("model", "queue"):
        for key, value in a[part].items():
            assert (value.double() - b[part][key].double()).abs().max() <= 1e-6, (part, key)


def test_relative_out_dir_and_data_root_are_made_absolute_on_the_login_node(tmp_path, monkeypatch):
    from slurm.__main__ import task_configs

    monkeypatch.chdir(tmp_path)
    cfg_name = "imagenet100_mioc.yaml"
    [(cfg, overrides)] = task_configs(cfg_name, ["data.root=imagenet100", "out_dir=/abs/run"], [])
    assert cfg.data.root == str(tmp_path.resolve() / "imagenet100")
    assert f"data.root={tmp_path.resolve() / 'imagenet100'}" in overrides
    assert cfg.out_dir == "/abs/run"
    [(cfg, overrides)] = task_configs(cfg_name, ["data.root=/data/in100", "out_dir=runs/x"], [])
    assert cfg.data.root == "/data/in100"
    assert cfg.out_dir == str(tmp_path.resolve() / "runs" / "x")
