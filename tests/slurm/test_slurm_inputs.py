"""``python -m slurm`` checks its resources before submitting and hands the job absolute paths:
a count below its bound or a misspelt memory unit is exit 2 with
nothing submitted, ``~`` is expanded and a relative path resolved on the login node (a job
that starts elsewhere would read ``<cwd>/~/...``), and ``linear_eval``'s arguments without ``--``
get the documented hint. In-process, with the executor replaced by a recorder."""

from __future__ import annotations

import pytest

import slurm.__main__ as launcher
from tests.helpers.fakeckpt import make_checkpoint
from tests.helpers.inproc import run
from tests.helpers.troubleshooting_quotes import assert_documented


class Recorder:
    """Stands in for submitit's executor: keeps what would be submitted."""

    def __init__(self) -> None:
        self.tasks: list = []

    def submit(self, task: object) -> object:
        self.tasks.append(task)
        return type("Job", (), {"job_id": "1"})()


@pytest.fixture
def submitted(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(launcher, "executor", lambda *a, **k: rec)
    monkeypatch.setattr(launcher, "check_cluster", lambda partition: None)
    return rec


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--nodes", "0"], "--nodes 0: give a whole number >= 1"),
        (["--nodes", "-2"], "--nodes -2: give a whole number >= 1"),
        (["--gpus-per-node", "-1"], "--gpus-per-node -1: give a whole number >= 0 (0 = a CPU job)"),
        (["--cpus-per-task", "0"], "--cpus-per-task 0: give a whole number >= 1"),
        (["--mem", "200X"], "--mem '200X': give a whole number with an optional unit K, M, G or T "
         "(e.g. 200G; no unit = megabytes)"),
        (["--mem", "0"], "--mem 0: SLURM reads 0 as all of each node's memory, which holds the "
         "whole node; give the amount the job needs, e.g. 200G"),  # S01: sbatch takes it
        (["--mem", "0G"], "--mem 0G: SLURM reads 0 as all of each node's memory, which holds the "
         "whole node; give the amount the job needs, e.g. 200G"),
    ],
)  # fmt: skip
def test_bad_resources_are_refused_before_submitting(flags, message, submitted, tmp_path):
    for argv in (["--cfg", "digits_moco.yaml", *flags, f"out_dir={tmp_path}"],
                 ["linear_eval", *flags, "--", "--ckpt", str(tmp_path)]):  # fmt: skip
        done = run(launcher.main, argv)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip() == f"error: {message} (nothing was submitted)"
        assert_documented(message)
    assert submitted.tasks == []
    assert_documented(message)


def test_home_and_relative_paths_reach_the_job_absolute(submitted, tmp_path, monkeypatch):
    home, cwd = tmp_path.resolve() / "home", tmp_path.resolve() / "login"
    home.mkdir(), cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    (cwd / "mine.yaml").write_text("train:\n  epochs: 3\n")
    done = run(launcher.main, ["--cfg", "mine.yaml", "data.root=~/data", "out_dir=~/runs/a"])
    assert done.returncode == 0, done.stderr
    [task] = submitted.tasks
    assert task.cfg == str(cwd / "mine.yaml")
    assert f"data.root={home / 'data'}" in task.overrides
    assert f"out_dir={home / 'runs' / 'a'}" in task.overrides
    make_checkpoint(cwd / "run")
    done = run(launcher.main, ["linear_eval", "--", "--ckpt", "run/checkpoints/last.pt",
                               "--data-root=~/d", "--out", "res.json"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert submitted.tasks[1].argv == ["--ckpt", str(cwd / "run/checkpoints/last.pt"),
                                       "--data-root", str(home / "d"), "--out",
                                       str(cwd / "res.json")]  # fmt: skip


def test_linear_eval_arguments_without_the_separator_get_the_hint(submitted, tmp_path):
    done = run(launcher.main, ["linear_eval", "--ckpt", str(tmp_path / "x.pt")])
    assert done.returncode == 2, done.stderr
    message = "give the evaluation's arguments after '--', e.g. -- --ckpt RUN/checkpoints/last.pt"
    assert done.stderr.strip() == f"error: {message} (nothing was submitted)"
    assert submitted.tasks == []
    assert_documented(message)


def test_a_sweep_whose_third_task_names_the_firsts_out_dir_is_refused(tmp_path, monkeypatch):
    """V09: every earlier task is compared, not only the one before."""
    from slurm.__main__ import task_configs
    from slurm.submit import SlurmError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SlurmError, match="sweep tasks 0 and 2 would share the run directory"):
        task_configs("digits_moco.yaml", [], [["out_dir=a"], ["out_dir=b"], ["out_dir=a"]])
