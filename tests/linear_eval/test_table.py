"""``python -m linear_eval table``: grouping by config, mean ± std over seeds, the bootstrap
interval of the seed mean and the paired difference to a baseline (re-derived in numpy), and the
runs left out with their reason."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import yaml

from linear_eval.cli import main as cli
from tests.helpers.eval_runs import N_TEST, make_run
from tests.helpers.troubleshooting_quotes import assert_documented


def test_table_groups_seeds_and_compares_with_the_baseline(tmp_path, capsys):
    rng = np.random.default_rng(0)
    base = [rng.random(N_TEST) < 0.6 for _ in range(3)]
    better = [rng.random(N_TEST) < 0.9 for _ in range(3)]
    for s in range(3):
        make_run(tmp_path, f"moco_s{s}", loss="infonce", seed=s, correct=base[s])
        make_run(tmp_path, f"hard_s{s}", loss="hard", seed=s, correct=better[s])
    make_run(tmp_path, "ring_s0", loss="ring", seed=0, correct=base[0], steps=4)  # unfinished
    make_run(tmp_path, "imix_s0", loss="imix", seed=0, correct=base[0], evaluated=False)
    out = tmp_path / "table"
    code = cli.main(["table", str(tmp_path / "*_s*"), "--baseline", str(tmp_path / "moco_s0"),
                     "--out", str(out)])  # fmt: skip
    assert code == 0
    text = out.with_suffix(".md").read_text()
    assert "ring_s0" in text and "unfinished: step 4 of 10" in text
    assert "imix_s0" in text and "no evaluation" in text
    rows = list(csv.reader(out.with_suffix(".csv").open()))
    header = rows[0]
    assert header[:3] == ["config", "loss.name", "seeds"]  # only the key that differs
    by_loss = {r[1]: dict(zip(header, r)) for r in rows[1:] if not r[0].startswith("(not")}
    assert set(by_loss) == {"infonce", "hard"}
    accs = [100 * c.mean() for c in better]
    mean, std = np.mean(accs), np.std(accs, ddof=1)
    assert by_loss["hard"]["knn_top1"] == f"{mean:.2f} ± {std:.2f}"
    assert by_loss["hard"]["seeds"] == "3"
    # the numpy re-derivation of the intervals: the same resampled test images for every run
    idx = np.random.default_rng(0).integers(0, N_TEST, size=(1000, N_TEST))
    seed_mean = np.mean([100 * c[idx].mean(1) for c in better], axis=0)
    low, high = np.quantile(seed_mean, [0.025, 0.975])
    assert by_loss["hard"]["knn_top1 95% CI"] == f"[{low:.2f}, {high:.2f}]"
    diff = seed_mean - np.mean([100 * c[idx].mean(1) for c in base], axis=0)
    dlow, dhigh = np.quantile(diff, [0.025, 0.975])
    point = mean - np.mean([100 * c.mean() for c in base])
    want = f"{point:+.2f} [{dlow:+.2f}, {dhigh:+.2f}]" + (" *" if dlow > 0 or dhigh < 0 else "")
    assert by_loss["hard"]["knn_top1 vs baseline"] == want
    assert by_loss["infonce"]["knn_top1 vs baseline"].startswith("+0.00 [+0.00, +0.00]")
    # the false-negative diagnostic of the last epoch, averaged over seeds (0, 0.1, 0.2)
    assert by_loss["hard"]["train_false_negative_fraction"].startswith("0.10 ± 0.10")
    assert "| config |" in capsys.readouterr().out


def test_no_finished_run_is_an_error_naming_them(tmp_path, capsys):
    make_run(tmp_path, "a_s0", loss="infonce", seed=0, correct=np.ones(N_TEST, bool), steps=2)
    assert cli.main(["table", str(tmp_path / "a_s0")]) == 2
    assert "unfinished" in capsys.readouterr().err
    assert cli.main(["table", str(tmp_path / "missing")]) == 2


def test_metrics_are_chosen_and_groups_named_without_the_seed(tmp_path, capsys):
    for s in range(2):
        make_run(tmp_path, f"hard_s{s}", loss="hard", seed=s, correct=np.ones(N_TEST, bool))
    assert cli.main(["table", str(tmp_path), "--metrics", "linear_top1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("linear probe: ") and lines[1] == ""  # the probe first
    out = lines[2:]
    assert out[0] == "| config | seeds | linear_top1 | linear_top1 95% CI | wall time | hardware |"
    assert out[2].startswith("| hard | 2 | 100.00 ± 0.00 | [100.00, 100.00] | - | - |")
    assert cli.main(["table", str(tmp_path), "--metrics", "nope"]) == 2
    assert "not found" in capsys.readouterr().err


def test_one_seed_shows_no_spread_and_provenance_gives_wall_time_and_hardware(tmp_path, capsys):
    run = make_run(tmp_path, "hard_s0", loss="hard", seed=0, correct=np.ones(N_TEST, bool))
    prov = {"wall_s": 193.4, "cpu_model": "AMD EPYC", "cpu_cores": 2, "gpu_model": None,
            "gpu_count": 0, "world_size": 1}  # fmt: skip
    (run / "provenance.json").write_text(json.dumps(prov))
    gpu = make_run(tmp_path, "ring_s0", loss="ring", seed=0, correct=np.ones(N_TEST, bool))
    prov_gpu = {**prov, "wall_s": 7322.0, "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8,
                "world_size": 8}  # fmt: skip
    (gpu / "provenance.json").write_text(json.dumps(prov_gpu))
    assert cli.main(["table", str(tmp_path), "--metrics", "knn_top1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("linear probe: ") and lines[1] == ""  # the probe first
    out = lines[2:]
    assert out[0].endswith("| knn_top1 | knn_top1 95% CI | wall time | hardware |")
    rows = {line.split(" | ")[0].strip("| "): line for line in out[2:4]}
    assert "± 0.00" not in rows["hard"] and "| 100.00 (1 seed) |" in rows["hard"]
    assert rows["hard"].endswith("| 3 min 13 s | AMD EPYC, 2 cores |")
    assert rows["ring"].endswith("| 2 h 02 min 02 s | 8x NVIDIA H100 80GB HBM3 |")


def test_a_cut_eval_json_is_an_error_naming_the_file(tmp_path, capsys):
    run = make_run(tmp_path, "hard_s0", loss="hard", seed=0, correct=np.ones(N_TEST, bool))
    ev = run / "eval" / "linear_eval.json"
    ev.write_text(ev.read_text()[:40])  # a copy cut short
    assert cli.main(["table", str(tmp_path)]) == 2
    message = capsys.readouterr().err.strip().splitlines()[-1].removeprefix("error: ")
    assert message.startswith(f"{ev} is not valid JSON (")
    assert_documented(message)
    ev.write_text("[1, 2]")
    assert cli.main(["table", str(tmp_path)]) == 2
    message = capsys.readouterr().err.strip().splitlines()[-1].removeprefix("error: ")
    assert message == f"{ev} holds no result (a JSON object of keys); move it away"
    assert_documented(message)


def test_a_damaged_provenance_leaves_its_run_out_with_a_note_naming_file_and_key(tmp_path, capsys):
    make_run(tmp_path, "hard_s0", loss="hard", seed=0, correct=np.ones(N_TEST, bool))
    bad = make_run(tmp_path, "ring_s0", loss="ring", seed=0, correct=np.ones(N_TEST, bool))
    (bad / "provenance.json").write_text(json.dumps({"wall_s": "x", "world_size": 1}))
    assert cli.main(["table", str(tmp_path), "--metrics", "knn_top1"]) == 0
    out = capsys.readouterr().out
    note = (
        f"{bad / 'provenance.json'}: key 'wall_s' is \"x\", not a number of seconds; fix the key, "
        "or move the file away to list the run without its wall time and hardware"
    )
    assert f"- `{bad}`: {note}" in out
    assert "| hard | 1 |" in out and "| ring |" not in out
    assert_documented(note)


def test_a_copied_run_folder_is_one_seed_not_two(tmp_path, capsys):
    """A run and its copy (the same seed in one row) would show as "2 seeds ± 0.00": the copy is
    left out with a note naming both folders, and the row's mean and std are over the distinct
    seeds (re-derived here); with --baseline naming the copy, the copy is the one kept."""
    rng = np.random.default_rng(3)
    correct = [rng.random(N_TEST) < 0.7 for _ in range(2)]
    for s in range(2):
        make_run(tmp_path, f"moco_s{s}", loss="infonce", seed=s, correct=correct[s])
    first, copy = tmp_path / "moco_s0", tmp_path / "moco_s0_copy"
    shutil.copytree(first, copy)
    out = tmp_path / "t"
    assert cli.main(["table", str(tmp_path / "moco_*"), "--out", str(out)]) == 0
    rows = list(csv.reader(out.with_suffix(".csv").open()))
    (row,) = [dict(zip(rows[0], r)) for r in rows[1:] if not r[0].startswith("(not")]
    accs = [100 * c.mean() for c in correct]
    assert row["config"] == "moco" and row["seeds"] == "2"
    assert row["knn_top1"] == f"{np.mean(accs):.2f} ± {np.std(accs, ddof=1):.2f}"
    assert (
        f"- `{copy}`: seed 0 repeats that of {first} in its row (one config, data and "
        "evaluation; a copy of that run?): left out, so one seed is not counted twice"
    ) in out.with_suffix(".md").read_text()
    assert cli.main(["table", str(tmp_path / "moco_*"), "--baseline", str(copy)]) == 0
    printed = capsys.readouterr().out
    assert f"- `{first}`: seed 0 repeats that of {copy} in its row" in printed
    assert "| moco, moco_s0_copy | 2 |" in printed  # the copy stands for seed 0


def test_the_significance_mark_is_two_sided(tmp_path):
    """``*`` marks a difference whose interval excludes 0 on either side: a significantly worse
    row carries it as a better one does, a row whose interval holds 0 does not; each cell against
    the numpy re-derivation (the same resampled test images for every run)."""
    rng = np.random.default_rng(4)
    draws = {"infonce": 0.7, "hard": 0.95, "ring": 0.3, "imix": 0.7}  # base, better, worse, same
    correct = {loss: [rng.random(N_TEST) < p for _ in range(2)] for loss, p in draws.items()}
    for loss, seeds in correct.items():
        for s, c in enumerate(seeds):
            make_run(tmp_path, f"{loss}_s{s}", loss=loss, seed=s, correct=c)
    out = tmp_path / "t"
    code = cli.main(["table", str(tmp_path / "*_s*"), "--baseline", str(tmp_path / "infonce_s0"),
                     "--out", str(out), "--metrics", "knn_top1"])  # fmt: skip
    assert code == 0
    rows = list(csv.reader(out.with_suffix(".csv").open()))
    cells = {r[1]: dict(zip(rows[0], r))["knn_top1 vs baseline"] for r in rows[1:]}
    idx = np.random.default_rng(0).integers(0, N_TEST, size=(1000, N_TEST))

    def seed_mean(seeds: list[np.ndarray]) -> np.ndarray:
        return np.mean([100 * c[idx].mean(1) for c in seeds], axis=0)

    sides = {}
    for loss in ("hard", "ring", "imix"):
        low, high = np.quantile(seed_mean(correct[loss]) - seed_mean(correct["infonce"]),
                                [0.025, 0.975])  # fmt: skip
        point = np.mean([100 * c.mean() for c in correct[loss]]) - np.mean(
            [100 * c.mean() for c in correct["infonce"]]
        )
        mark = " *" if low > 0 or high < 0 else ""
        assert cells[loss] == f"{point:+.2f} [{low:+.2f}, {high:+.2f}]{mark}", loss
        sides[loss] = "above" if low > 0 else "below" if high < 0 else "holds 0"
    assert sides == {"hard": "above", "ring": "below", "imix": "holds 0"}  # all three cases
    assert cells["ring"].endswith(" *") and not cells["imix"].endswith(" *")


def test_a_run_stopped_by_max_steps_is_in_with_a_note_naming_it(tmp_path, capsys):
    """``train.max_steps`` cuts a run short of its schedule on purpose: it is in the table (in a
    row of its ``train.max_steps``) with a note naming it, even when its last step was not a
    logged one (the step is read from its provenance's ``end_step``); a run stopped earlier is
    left out as unfinished, with the limit named."""
    ones = np.ones(N_TEST, bool)
    cut = make_run(tmp_path, "cut_s0", loss="infonce", seed=0, correct=ones, steps=5, total=10)
    early = make_run(tmp_path, "early_s0", loss="infonce", seed=1, correct=ones, steps=2, total=10)
    for run in (cut, early):
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        cfg["train"]["max_steps"] = 5
        (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    logged = (cut / "metrics.jsonl").read_text().splitlines()[:4]  # step 5 fell between logs
    (cut / "metrics.jsonl").write_text("\n".join(logged) + "\n")
    (cut / "provenance.json").write_text(json.dumps({"segments": [{"end_step": 5}]}))
    make_run(tmp_path, "whole_s0", loss="infonce", seed=0, correct=ones)
    assert cli.main(["table", str(tmp_path / "*_s0"), "--metrics", "knn_top1"]) == 0
    out = capsys.readouterr().out
    assert "| config | train.max_steps | seeds |" in out
    assert "| cut | 5 | 1 |" in out and "| whole | 0 | 1 |" in out
    assert (
        f"- `{cut}`: stopped by train.max_steps at step 5 of 10 (its schedule's): in the row of "
        "its train.max_steps, apart from runs of the whole schedule"
    ) in out
    assert f"- `{early}`: unfinished: step 2 of 5 (train.max_steps=5; the schedule has 10)" in out


def test_a_group_of_x_seed0_and_x_seed1_is_named_x():
    """V07: the table names a group by its run folders without the seed suffix; ``_seedN`` as
    well as ``_sN`` (a regex that strips only ``_sN`` names it "x_seed0, x_seed1")."""
    from types import SimpleNamespace

    from linear_eval.cli.table import label

    runs = [SimpleNamespace(path=Path(f"/r/x_seed{i}")) for i in (0, 1)]
    assert label(runs) == "x"
    assert label([SimpleNamespace(path=Path("/r/x_s3")), *runs]) == "x"
