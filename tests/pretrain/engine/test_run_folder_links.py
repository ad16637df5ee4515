"""A run folder someone hands you (a tarball keeps symbolic links) makes nothing write outside it:
a resume, ``python -m linear_eval`` and an export refuse a link where they would write (exit 2,
the message naming the link and where it points), and the file the link points to is unchanged.

Each case plants a link in a copy of one finished one-step run (made once for the module) or of a
fake checkpoint's folder, points it at a file or folder outside, and checks the outside after."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.helpers.fakeckpt import make_checkpoint
from tests.helpers.inproc import linear_eval, pretrain
from tests.helpers.troubleshooting_quotes import assert_documented

ARGS = ["model.width=8", "train.log_every=1", "eval.knn_every=0", "train.progress_bar=false",
        "data.num_workers=0", "train.batch_size=32", "moco.queue_size=64"]  # fmt: skip
PRECIOUS = "the user's own lines\n"


def resume(run: Path, *extra: str):
    return pretrain("--cfg", "digits_moco.yaml", f"out_dir={run}", *ARGS, "train.max_steps=2",
                    *extra)  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A run folder after one step: checkpoint, config, derived, metrics, provenance, lock."""
    run = tmp_path_factory.mktemp("trained") / "run"
    done = pretrain("--cfg", "digits_moco.yaml", f"out_dir={run}", *ARGS, "train.max_steps=1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (run / "metrics.jsonl").is_file() and (run / ".lock").is_file()
    return run


def handed(trained: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the trained run (as a tarball would unpack it) and a folder outside it."""
    run, outside = tmp_path / "handed", tmp_path / "home"
    shutil.copytree(trained, run, symlinks=True)
    outside.mkdir()
    return run, outside


def plant(link: Path, target: Path) -> None:
    """``link`` -> ``target``, a file outside the run folder holding the user's own lines."""
    target.write_text(PRECIOUS)
    link.unlink(missing_ok=True)
    link.symlink_to(target)


def refused(done, link: Path) -> str:
    """The refusal's message: exit 2, naming the link and where it points; documented."""
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    message = done.stderr.strip().splitlines()[-1].removeprefix("error: ")
    assert f"{link} is a symbolic link to {os.readlink(link)}" in message, message
    assert_documented(message)
    return message


@pytest.mark.parametrize(
    "name", ["config.yaml", "derived.yaml", "metrics.jsonl", ".lock", "provenance.json"]
)
def test_a_resume_writes_through_no_linked_file_of_the_run(trained, tmp_path, name):
    """A resume rewrites config.yaml and derived.yaml, rewrites metrics.jsonl (dropping the lines
    after the checkpoint), truncates the lock and rewrites provenance.json: none through a link."""
    run, outside = handed(trained, tmp_path)
    target = outside / "bashrc"
    plant(run / name, target)
    refused(resume(run), run / name)
    assert target.read_text() == PRECIOUS
    assert (run / name).is_symlink()


@pytest.mark.parametrize("linked", ["checkpoints", "checkpoints/last.pt"])
def test_a_resume_refuses_checkpoints_linked_out_of_the_run(trained, tmp_path, linked):
    """``checkpoints/`` linked to a folder elsewhere (the stale-file clean-up and the new
    checkpoint would land there), or ``last.pt`` itself a link."""
    run, outside = handed(trained, tmp_path)
    if linked == "checkpoints":
        shutil.move(run / "checkpoints", outside / "checkpoints")
        (run / "checkpoints").symlink_to(outside / "checkpoints")
        kept = {p.name: p.read_bytes() for p in (outside / "checkpoints").iterdir()}
    else:
        shutil.move(run / "checkpoints" / "last.pt", outside / "last.pt")
        (run / "checkpoints" / "last.pt").symlink_to(outside / "last.pt")
        kept = {"last.pt": (outside / "last.pt").read_bytes()}
    refused(resume(run), run / linked)
    folder = outside / "checkpoints" if linked == "checkpoints" else outside
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == kept


@pytest.fixture
def fake_run(tmp_path) -> Path:
    """A fake checkpoint's run folder (no training): ``RUN/checkpoints/last.pt``."""
    return make_checkpoint(tmp_path / "run").parent.parent


def evaluate(run: Path, *extra: str):
    return linear_eval("--ckpt", str(run / "checkpoints" / "last.pt"), "--epochs", "1",
                       "--no-cache", *extra)  # fmt: skip


@pytest.mark.parametrize("random_init", [False, True], ids=["trained", "random"])
def test_linear_eval_writes_no_result_through_a_link(fake_run, tmp_path, random_init):
    """``RUN/eval/linear_eval.json`` (``_random.json`` with ``--random-init``) linked to a file
    outside the run, ``~/.bashrc`` say."""
    name = "linear_eval_random.json" if random_init else "linear_eval.json"
    (fake_run / "eval").mkdir()
    target = tmp_path / "bashrc"
    plant(fake_run / "eval" / name, target)
    flags = ["--random-init"] if random_init else []
    refused(evaluate(fake_run, *flags), fake_run / "eval" / name)
    assert target.read_text() == PRECIOUS


def test_linear_eval_writes_nothing_into_an_eval_folder_linked_out(fake_run, tmp_path):
    """``RUN/eval -> ../home``: the results would land in ``home/``."""
    home = tmp_path / "home"
    home.mkdir()
    (fake_run / "eval").symlink_to("../home")
    message = refused(evaluate(fake_run), fake_run / "eval")
    assert f"outside the run folder {fake_run}" in message
    assert list(home.iterdir()) == []


def test_a_report_refuses_a_linked_report_before_any_work(fake_run, tmp_path):
    """``linear_eval report`` writes ``RUN/reports/report.md`` and figures: a link among them is
    refused when the session opens, before a feature is computed."""
    (fake_run / "reports").mkdir()
    target = tmp_path / "bashrc"
    plant(fake_run / "reports" / "report.md", target)
    ckpt = fake_run / "checkpoints" / "last.pt"
    refused(
        linear_eval("report", "--ckpt", str(ckpt), "--no-cache"), fake_run / "reports" / "report.md"
    )
    assert target.read_text() == PRECIOUS
    assert not (fake_run / "eval").exists()


def test_an_export_writes_through_no_planted_temporary_file(fake_run, tmp_path):
    """The export's temporary file is made afresh next to ``--out``, never opened by a name a
    folder could already hold (``r.pth.tmp`` linked to a file outside)."""
    target = tmp_path / "bashrc"
    out = fake_run / "r.pth"
    plant(fake_run / "r.pth.tmp", target)
    ckpt = make_checkpoint(fake_run, "model.arch=resnet18", "model.cifar_stem=false")
    done = pretrain("export", "--ckpt", str(ckpt), "--to", "torchvision", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert target.read_text() == PRECIOUS
    assert out.is_file() and not out.is_symlink()
