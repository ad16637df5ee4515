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

ROOT = Path(__file__).resolve().parents[1]
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
    [(None, "-"), (59.4, "59 s"), (193.4, "3 min 13 s"), (3600, "1 h 00 min"),
     (7322, "2 h 02 min")],
)  # fmt: skip
def test_duration(seconds, text):
    assert provenance.duration(seconds) == text


def test_an_unwritable_record_warns_once_and_the_run_goes_on(tmp_path, capsys):
    from tests.test_troubleshooting_data import assert_documented, warning_of

    prov = provenance.start(tmp_path, torch.device("cpu"))
    (tmp_path / provenance.FILE).unlink()
    (tmp_path / provenance.FILE).mkdir()  # a folder where the file should be: the write fails
    provenance.finish(prov, 3)
    assert_documented(warning_of(capsys))
    assert prov.snapshot()["segments"][0]["start"]  # the record is still there for checkpoints
