"""benchmarks/moco_curve.py: the issue-15 table, from metrics.jsonl as the trainer writes it."""

from __future__ import annotations

import json
import math
import sys

import pytest

from tests.helpers.paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import moco_curve  # noqa: E402


def test_official_curve_is_the_notebooks_output():
    ref = moco_curve.official()
    assert len(ref) == 200 and (ref[1], ref[5], ref[10], ref[20], ref[200]) == (
        31.98,
        37.95,
        48.03,
        61.38,
        82.58,
    )


def test_table_from_a_run_directory(tmp_path, capsys):
    recs = [
        {
            "kind": "step",
            "global_step": 5,
            "epoch": 0.2,
            "images_per_s": 10.0,
            "data_wait_frac": 0.1,
        },
        {
            "kind": "step",
            "global_step": 10,
            "epoch": 0.6,
            "images_per_s": 30.0,
            "data_wait_frac": 0.3,
        },
        {
            "kind": "step",
            "global_step": 15,
            "epoch": 0.9,
            "images_per_s": 20.0,
            "data_wait_frac": 0.2,
        },
        {
            "kind": "epoch",
            "epoch": 1,
            "knn_top1": 30.5,
            "knn_top1_head": 30.5,
            "knn_top1_backbone": 35.25,
            "epoch_time_s": 120.0,
        },
        {"kind": "epoch", "epoch": 2, "loss": 7.0, "epoch_time_s": 100.0},  # no monitor: no row
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    assert moco_curve.main([f"moco={tmp_path}", "--png", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out.splitlines()
    row = next(line for line in out if line.startswith("| 1 |"))
    # official epoch 1 31.98; ours 30.50 (-1.48); backbone 35.25; median img/s 20.0, wait 20 %
    assert row == "| 1 | 31.98 | 30.50 | -1.48 | 35.25 | 20.0 | 20 % | 2.0 |"
    assert not any(line.startswith("| 2 |") for line in out)
    assert (tmp_path / "c.png").stat().st_size > 1000
    import matplotlib.pyplot as plt

    assert plt.get_fignums() == []  # closed: a figure left open leaks into the next test's


def test_a_folder_without_metrics_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="metrics.jsonl not found"):
        moco_curve.main([f"x={tmp_path}"])


def test_a_recorded_curve_csv_reads_like_a_run(tmp_path, capsys):
    path = tmp_path / "moco.csv"
    path.write_text(
        "epoch,knn_head,knn_backbone,images_per_s,data_wait,epoch_time_s\n"
        "1,32.78,35.80,71,0,690\n2,34.55,37.50,,,\n"
    )
    run = moco_curve.read_run(path)
    assert run[1]["knn"] == run[1]["knn_head"] == 32.78 and run[1]["epoch_time_s"] == 690
    assert run[2]["knn_backbone"] == 37.5 and math.isnan(run[2]["images_per_s"])
    moco_curve.main([f"moco={path}"])
    out = capsys.readouterr().out
    assert "| 1 | 31.98 | 32.78 | +0.80 | 35.80 | 71.0 | 0 % | 11.5 |" in out
    assert "| 2 | 33.52 | 34.55 | +1.03 | 37.50 | nan |" in out
    moco_curve.main([f"moco={path}", "--save-curves", str(tmp_path / "saved")])
    again = moco_curve.read_run(tmp_path / "saved" / "moco.csv")
    assert again.keys() == run.keys() and again[1] == run[1]


def test_a_curve_csv_without_the_columns_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("epoch,knn\n1,30\n")
    with pytest.raises(SystemExit, match="needs the columns"):
        moco_curve.read_run(path)
    with pytest.raises(SystemExit, match="not found"):
        moco_curve.read_run(tmp_path / "missing.csv")
