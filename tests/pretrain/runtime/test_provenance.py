"""Every run records where and on what it ran (``RUN/provenance.json`` and each checkpoint): the
commit and dirty flag against git itself, the cores against the process's affinity, one segment
per process (a resume adds one and the total wall time is their sum), and checkpoints that still
load with ``weights_only=True``."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from pretrain import config
from pretrain.engine import loop
from pretrain.runtime import provenance
from tests.helpers.paths import ROOT

TINY = [
    "model.width=8",
    "train.batch_size=64",
    "moco.queue_size=64",
    "train.progress_bar=false",
    "train.log_every=5",
    "eval.knn_every=0",
    "data.num_workers=0",
    "train.max_steps=6",
]


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def when(stamp: str) -> dt.datetime:
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")


def test_run_records_provenance_in_its_folder_and_checkpoint_and_resume_adds_a_segment(tmp_path):
    cfg = config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *TINY])
    assert loop.main(cfg) == 0
    prov = json.loads((tmp_path / provenance.FILE).read_text())
    assert len(prov["segments"]) == 1
    seg = prov["segments"][0]
    if (ROOT / ".git").exists():  # a git checkout: the commit and dirty flag are git's own
        assert seg["commit"] == git("rev-parse", "HEAD")
        assert seg["dirty"] == bool(  # tracked changes, or untracked files in the packages
            git("status", "--porcelain", "--untracked-files=no")
            or git("status", "--porcelain", "--untracked-files=all", "--", *provenance.PACKAGES)
        )
    assert seg["cpu_cores"] == len(os.sched_getaffinity(0))
    assert seg["torch"] == str(torch.__version__) and seg["device"] == "cpu"
    assert seg["gpu_model"] is None and seg["gpu_count"] == 0 and seg["world_size"] == 1
    assert seg["end_step"] == 6 and seg["peak_rss_mib"] > 10
    assert when(seg["start"]) <= when(seg["end"])
    # the segment's wall time is its start-to-end span (whole seconds in the stamps)
    span = (when(seg["end"]) - when(seg["start"])).total_seconds()
    assert abs(seg["wall_s"] - span) <= 1.5 and prov["wall_s"] == seg["wall_s"]

    state = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)
    held = state["provenance"]
    assert held["commit"] == seg["commit"] and held["segments"][0]["end"] is None
    assert 0 < held["wall_s"] <= prov["wall_s"]

    more = config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *TINY[:-1], "train.max_steps=9"])
    assert loop.main(more) == 0
    prov2 = json.loads((tmp_path / provenance.FILE).read_text())
    assert [s["end_step"] for s in prov2["segments"]] == [6, 9]
    assert prov2["segments"][0] == seg  # the first process's record is kept as it was
    total = sum(s["wall_s"] for s in prov2["segments"])
    assert prov2["wall_s"] == pytest.approx(total, abs=0.11)
    assert prov2["start"] == seg["start"] and prov2["end"] == prov2["segments"][1]["end"]
    # the same command again trains nothing: no segment is added, the file is as it was
    before = (tmp_path / provenance.FILE).read_bytes()
    assert loop.main(more) == 0
    assert (tmp_path / provenance.FILE).read_bytes() == before


def test_summary_says_mixed_when_segments_ran_on_different_hardware():
    a = {"cpu_model": "AMD EPYC", "cpu_cores": 2, "gpu_model": None, "gpu_count": 0,
         "world_size": 1, "wall_s": 10.0, "peak_rss_mib": 5.0, "commit": "a",
         "dirty": False}  # fmt: skip
    b = {**a, "gpu_model": "NVIDIA H100", "gpu_count": 1, "wall_s": 2.5, "peak_rss_mib": 7.0,
         "peak_gpu_mib": 100.0, "dirty": True}  # fmt: skip
    s = provenance.summarize([a, b])
    assert s["wall_s"] == 12.5 and s["peak_rss_mib"] == 7.0 and s["peak_gpu_mib"] == 100.0
    assert s["gpu_model"] == "mixed" and s["commit"] == "a" and s["dirty"] is True
    assert provenance.hardware(s) == "mixed (see provenance.json)"
    assert provenance.hardware(provenance.summarize([a])) == "AMD EPYC, 2 cores"
    assert provenance.hardware(None) == "-"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (59.4, "59 s"), (193.4, "3 min 13 s"), (3600, "1 h 00 min 00 s"),
     (7322, "2 h 02 min 02 s"), (4608, "1 h 16 min 48 s")],
)  # fmt: skip
def test_duration(seconds, text):
    assert provenance.duration(seconds) == text


def test_an_unwritable_record_warns_once_and_the_run_goes_on(tmp_path, capsys):
    from tests.helpers.troubleshooting_quotes import assert_documented, warning_of

    prov = provenance.start(tmp_path, torch.device("cpu"))
    (tmp_path / provenance.FILE).unlink()
    (tmp_path / provenance.FILE).mkdir()  # a folder where the file should be: the write fails
    provenance.finish(prov, 3)
    assert_documented(warning_of(capsys))
    assert prov.snapshot()["segments"][0]["start"]  # the record is still there for checkpoints


# --- only this package's own commit; the config file as given ------------------------------


def git_in(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def repo(where: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    git_in(where, "init", "-q")
    (where / "README").write_text("x\n")
    git_in(where, "add", "README")
    git_in(where, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")


def as_if_imported_from(monkeypatch, root: Path) -> None:
    (root / "pretrain" / "runtime").mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(provenance, "__file__", str(root / "pretrain/runtime/provenance.py"))


def test_a_copy_vendored_in_another_repository_records_no_commit(tmp_path, monkeypatch):
    repo(tmp_path / "other")
    as_if_imported_from(monkeypatch, tmp_path / "other" / "third_party" / "negmine")
    got = provenance.code_version()
    assert got["commit"] is None and got["dirty"] is None, got


def test_an_untracked_file_in_the_packages_is_dirty(tmp_path, monkeypatch):
    repo(tmp_path / "own")
    as_if_imported_from(monkeypatch, tmp_path / "own")
    clean = provenance.code_version()
    head = git_in(tmp_path / "own", "rev-parse", "HEAD")
    assert clean["commit"] == head and clean["dirty"] is False
    (tmp_path / "own" / "pretrain" / "mine.py").write_text("x = 1\n")
    assert provenance.code_version()["dirty"] is True


def test_unknown_stays_null_at_the_top_level():
    base = {"commit": None, "wall_s": 1.0}
    assert provenance.summarize([{**base, "dirty": None}])["dirty"] is None
    assert provenance.summarize([{**base, "dirty": None}, {**base, "dirty": True}])["dirty"] is True
    assert provenance.summarize([{**base, "dirty": False}])["dirty"] is False


def test_the_config_file_given_to_cfg_is_recorded_resolved_with_its_sha256(tmp_path, monkeypatch):
    """The segment names the file given to ``--cfg`` (a relative path, resolved) and hashlib's
    sha256 of its bytes; a config built in code records null for both."""
    import hashlib
    import json
    import shutil

    from pretrain import config
    from pretrain.engine import loop
    from tests.helpers.inproc import pretrain
    from tests.helpers.runs import SUBSET_RUN

    cfg_file = tmp_path / "mine.yaml"
    shutil.copy(config.CONFIG_DIR / "digits_moco.yaml", cfg_file)
    with cfg_file.open("a") as f:
        f.write("# my own copy\n")
    monkeypatch.chdir(tmp_path)
    done = pretrain("--cfg", "mine.yaml", "out_dir=run", *SUBSET_RUN, "train.max_steps=1")
    assert done.returncode == 0, done.stderr[-2000:]
    prov = json.loads((tmp_path / "run" / provenance.FILE).read_text())
    (seg,) = prov["segments"]
    assert seg["config_file"] == str(cfg_file.resolve())
    assert seg["config_sha256"] == hashlib.sha256(cfg_file.read_bytes()).hexdigest()
    assert prov["config_sha256"] == seg["config_sha256"]

    built = config.load("digits_moco.yaml", [f"out_dir={tmp_path / 'built'}", *SUBSET_RUN,
                                             "train.max_steps=1"])  # fmt: skip
    assert loop.main(built) == 0
    seg = json.loads((tmp_path / "built" / provenance.FILE).read_text())["segments"][0]
    assert seg["config_file"] is None and seg["config_sha256"] is None


def test_a_shipped_config_is_recorded_relative_to_the_package_tree():
    """A shipped recipe's path names no directory of the measuring machine (kept logs are
    refused with one); its sha256 is hashlib's of the file."""
    import hashlib

    from pretrain import config

    shipped = config.CONFIG_DIR / "digits_mioc.yaml"
    rec = provenance.config_record(shipped)
    assert rec == {"config_file": "pretrain/configs/digits_mioc.yaml",
                   "config_sha256": hashlib.sha256(shipped.read_bytes()).hexdigest()}  # fmt: skip


def test_outside_any_repository_commit_and_dirty_stay_null(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no enclosing repository
    as_if_imported_from(monkeypatch, tmp_path / "plain")
    got = provenance.code_version()
    assert got["commit"] is None and got["dirty"] is None, got
    base = {"wall_s": 1.0, **got}
    assert provenance.summarize([base])["dirty"] is None
