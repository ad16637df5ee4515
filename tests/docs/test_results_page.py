"""The results page (docs/results.md) and the README's digits table are generated from kept logs by
``scripts/gen_results.py``: they match the logs in the repository, every shipped recipe has a row,
a row's numbers are re-derived here from its log files (``statistics``, not the script's numpy),
and a log or a page that changes makes ``--check`` fail."""

from __future__ import annotations

import json
import re
import shutil
import statistics

import pytest
import yaml

from pretrain import config
from tests.helpers.results_runs import fake_run, gen_results, rows


def recipe_of(row: list[str]) -> str:
    """The config of a row's first cell (a variant's overrides follow it)."""
    return re.match(r"`([^`]+)`", row[0]).group(1)


def test_the_pages_match_the_kept_logs():
    assert gen_results.main(["--check"]) == 0


def test_every_shipped_recipe_has_a_row_and_rows_equal_their_logs():
    page = gen_results.PAGE.read_text()
    table = rows(page)
    shipped = sorted(p.name for p in config.CONFIG_DIR.glob("*.yaml"))
    assert sorted({recipe_of(r) for r in table}) == shipped
    for row in table:
        recipe, knn, linear, log = recipe_of(row), row[4], row[5], row[11]
        runs = re.findall(r"\]\(results/logs/([^/]+)/metrics\.jsonl\)", log)
        if not runs:
            continue
        evals = [json.loads((gen_results.RUNS / r / "eval" / "linear_eval.json").read_text())
                 for r in runs]  # fmt: skip
        one_class = yaml.safe_load((gen_results.RUNS / runs[0] / "config.yaml").read_text())[
            "data"
        ].get("in_classes")
        for cell, key in ((knn, "knn_top1"), (linear, "linear_top1")) if not one_class else ():
            values = [e[key] for e in evals]
            want = (f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"
                    if len(values) > 1 else f"{values[0]:.2f} (1 seed)")  # fmt: skip
            assert cell == want, (recipe, key, cell, want)
        for r in runs:  # each log is the recipe's, finished, with its provenance
            prov = json.loads((gen_results.RUNS / r / "provenance.json").read_text())
            assert f"--cfg {recipe}" in prov["segments"][0]["command"]
            cfg = yaml.safe_load((gen_results.RUNS / r / "config.yaml").read_text())
            epochs = [json.loads(s)["epoch"] for s in
                      (gen_results.RUNS / r / "metrics.jsonl").read_text().splitlines()
                      if '"kind": "epoch"' in s]  # fmt: skip
            assert max(epochs) == cfg["train"]["epochs"] == int(row[2].split()[0])
        assert row[3] == ", ".join(
            str(yaml.safe_load((gen_results.RUNS / r / "config.yaml").read_text())["seed"])
            for r in runs
        )
        if one_class:  # trained on some classes: no accuracy, the AUROC in the note
            assert knn == linear == gen_results.ONE_CLASS, (recipe, knn, linear)
    for row in table:  # a recipe without a log says so
        if row[3] == "-":
            assert row[4] == row[5] == "not run"


def test_a_row_is_generated_from_its_logs_and_a_changed_log_fails_the_check(
    tmp_path, monkeypatch, capsys
):
    runs, page, readme = tmp_path / "runs", tmp_path / "results.md", tmp_path / "README.md"
    shutil.copy(gen_results.README, readme)
    monkeypatch.setattr(gen_results, "RUNS", runs)
    monkeypatch.setattr(gen_results, "PAGE", page)
    monkeypatch.setattr(gen_results, "README", readme)
    fake_run(runs / "digits_moco_s0", 0, 90.0, 100.0)
    fake_run(runs / "digits_moco_s1", 1, 92.0, 200.0)
    assert gen_results.main([]) == 0 and gen_results.main(["--check"]) == 0
    (row,) = [r for r in rows(page.read_text()) if r[0] == "`digits_moco.yaml`"]
    assert row[3:9] == ["0, 1", f"91.00 ± {statistics.stdev([90.0, 92.0]):.2f}", "95.50 ± 0.71",
                        "AMD EPYC, 2 cores", "2 min 30 s per run (1 min 40 s to 3 min 20 s)",
                        "1.2 GiB RSS"]  # fmt: skip
    assert row[9:11] == ["2026-11-27", "abcdef0"]
    assert "| `digits_moco.yaml` | 91.00 ± 1.41 | 95.50 ± 0.71 | 0, 1 |" in readme.read_text()
    assert "Measured on AMD EPYC, 2 cores, 2026-11-27, code at abcdef0;" in readme.read_text()
    ev = runs / "digits_moco_s1" / "eval" / "linear_eval.json"
    ev.write_text(json.dumps({"knn_top1": 92.5, "linear_top1": 96.0}))
    capsys.readouterr()
    assert gen_results.main(["--check"]) == 1
    assert "differs from its logs" in capsys.readouterr().err
    gen_results.main([])
    page.write_text(page.read_text().replace("91.25 ± ", "91.35 ± "))  # a hand edit
    assert gen_results.main(["--check"]) == 1


def test_a_log_of_an_unknown_recipe_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(gen_results, "RUNS", tmp_path)
    fake_run(tmp_path / "x", 0, 90.0, 100.0)
    prov = json.loads((tmp_path / "x" / "provenance.json").read_text())
    prov["segments"][0]["command"] = "python -m pretrain --cfg mine.yaml"
    (tmp_path / "x" / "provenance.json").write_text(json.dumps(prov))
    with pytest.raises(ValueError, match="not shipped: mine.yaml"):
        gen_results.table()


def test_a_variant_makes_its_own_row_and_the_mioc_ablation_stands_beside_mioc(
    tmp_path, monkeypatch
):
    """Runs of one recipe with different overrides are different rows; every MiOC recipe has an
    ablation row (O = the whole queue), "not run" until its logs are kept."""
    monkeypatch.setattr(gen_results, "RUNS", tmp_path)
    ablation = "negatives.kwargs.selection=queue"
    fake_run(tmp_path / "a", 0, 90.0, 100.0, "digits_mioc.yaml")
    fake_run(tmp_path / "b", 0, 80.0, 100.0, "digits_mioc.yaml", ablation, "train.threads=1")
    table = [r for r in gen_results.table() if r.recipe == "digits_mioc.yaml"]
    assert [(r.variant, r.knn) for r in table] == [("", "90.00 (1 seed)"),
                                                   (ablation, "80.00 (1 seed)")]  # fmt: skip
    assert "O = the whole queue (no OC-SVM fitted)" in table[1].notes[0]
    assert gen_results.name(table[1]).startswith(f"`digits_mioc.yaml` `{ablation}` (ablation")
    cifar = [r for r in gen_results.table() if r.recipe == "cifar10_mioc.yaml"]
    assert cifar[-1].variant == ablation and cifar[-1].knn == "not run"


def test_runs_with_a_random_init_evaluation_get_the_untrained_row(tmp_path, monkeypatch):
    """``linear_eval --random-init``'s file, kept beside a run's, makes an untrained-encoder row
    under the trained one, its mean over the seeds re-derived here."""
    monkeypatch.setattr(gen_results, "RUNS", tmp_path)
    for seed, knn in ((0, 40.0), (1, 44.0)):
        fake_run(tmp_path / f"m{seed}", seed, 90.0, 100.0)
        (tmp_path / f"m{seed}" / "eval" / "linear_eval_random.json").write_text(
            json.dumps({"knn_top1": knn, "linear_top1": 60.0 + seed})
        )
    trained, untrained = [r for r in gen_results.table() if r.recipe == "digits_moco.yaml"]
    assert trained.variant == "" and untrained.variant == gen_results.RANDOM
    assert untrained.knn == f"42.00 ± {statistics.stdev([40.0, 44.0]):.2f}"
    assert untrained.linear == "60.50 ± 0.71" and untrained.seeds == "0, 1"
    assert "linear_eval_random.json" in untrained.log
    (tmp_path / "m1" / "eval" / "linear_eval_random.json").unlink()  # one seed without: no row
    assert [r.variant for r in gen_results.table() if r.recipe == "digits_moco.yaml"] == [""]


def test_a_one_class_recipes_row_notes_its_detection_auroc(tmp_path, monkeypatch):
    """Runs that kept ``eval/oneclass.json`` get the s_con AUROC over the seeds in their note,
    re-derived here; one run without it: no note (never a partial mean)."""
    monkeypatch.setattr(gen_results, "RUNS", tmp_path)
    for seed, auroc in ((0, 91.0), (1, 95.0)):
        fake_run(tmp_path / f"f{seed}", seed, 90.0, 100.0)
        record = {"normal_sets": [[0]], "settings": {"k": 1},
                  "detectors": {"s_con": {"mean": {"auroc": auroc}}}}  # fmt: skip
        (tmp_path / f"f{seed}" / "eval" / "oneclass.json").write_text(json.dumps(record))
    (row,) = [r for r in gen_results.table() if r.recipe == "digits_moco.yaml"]
    want = f"AUROC {statistics.mean([91.0, 95.0]):.2f} ± {statistics.stdev([91.0, 95.0]):.2f}"
    (note,) = [n for n in row.notes if "one-class detection" in n]
    assert "in-distribution class 0 " in note and "s_con (k 1)" in note and want in note
    (tmp_path / "f1" / "eval" / "oneclass.json").unlink()
    (row,) = [r for r in gen_results.table() if r.recipe == "digits_moco.yaml"]
    assert not any("one-class detection" in n for n in row.notes)


def test_the_cifar10_section_has_a_row_per_arm_and_mioc_minus_its_ablation(tmp_path, monkeypatch):
    """benchmarks/science.py's arms: "not run" without logs; with kept MiOC and ablation runs (two
    seeds each, per-image results), their rows and the paired bootstrap of the seed-averaged
    difference, re-derived here with numpy on the same resampled test images."""
    import numpy as np
    import results_science

    monkeypatch.setattr(gen_results, "RUNS", tmp_path)
    rng = np.random.default_rng(1)
    hits = {}
    for name, sets in (("m", ()), ("q", ("negatives.kwargs.selection=queue",))):
        for seed in (0, 1):
            run = tmp_path / f"{name}{seed}"
            fake_run(run, seed, 80.0 + seed, 100.0, "cifar10_mioc.yaml", *sets)
            bits = {
                k: rng.random(500) < (0.8 if name == "m" else 0.7)
                for k in ("knn_top1", "linear_top1")
            }
            hits[name, seed] = bits
            ev = json.loads((run / "eval" / "linear_eval.json").read_text())
            ev["per_sample"] = {k: "".join("1" if b else "0" for b in v) for k, v in bits.items()}
            ev["test_set"] = {"size": 500}
            (run / "eval" / "linear_eval.json").write_text(json.dumps(ev))
    lines = results_science.section(gen_results.table(), gen_results.name, gen_results.cell)
    text = "\n".join(lines)
    assert "| moco | `cifar10_moco.yaml` | 200 | - | not run | not run |" in text
    (mioc,) = [s for s in lines if s.startswith("| mioc |")]
    assert "| 30 of 200 | 0, 1 | 80.50 ± 0.71 |" in mioc
    assert "| 81.01 | setup as in the paper, not restated here |" in text
    idx = np.random.default_rng(0).integers(0, 500, size=(1000, 500))
    for key, label in (("knn_top1", "kNN"), ("linear_top1", "linear")):
        m = np.mean([100 * hits["m", s][key][idx].mean(axis=1) for s in (0, 1)], axis=0)
        q = np.mean([100 * hits["q", s][key][idx].mean(axis=1) for s in (0, 1)], axis=0)
        point = np.mean([100 * hits["m", s][key].mean() - 100 * hits["q", s][key].mean()
                         for s in (0, 1)])  # fmt: skip
        low, high = np.quantile(m - q, [0.025, 0.975])
        star = " *" if low > 0 or high < 0 else ""
        assert f"{label} {point:+.2f} [{low:+.2f}, {high:+.2f}]{star}" in text
    shutil.rmtree(tmp_path / "q1")  # the ablation at seed 0 only: no pair of the same seeds
    text = "\n".join(
        results_science.section(gen_results.table(), gen_results.name, gen_results.cell)
    )
    assert "- not run: both arms at the same epochs and seeds are needed." in text


def test_a_cut_kept_log_is_an_error_naming_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gen_results, "RUNS", tmp_path)
    fake_run(tmp_path / "x", 0, 90.0, 100.0)
    ev = tmp_path / "x" / "eval" / "linear_eval.json"
    ev.write_text(ev.read_text()[:12])  # a copy cut short
    assert gen_results.main(["--check"]) == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert message.startswith(f"error: {ev} is not valid JSON (")


def test_a_run_stopped_short_of_its_epochs_says_so_in_its_own_row(tmp_path, monkeypatch):
    """A run whose ``train.epochs`` is 40 (raised on a resume: the first command, which names
    the variant, is the recipe's) with 30 epochs logged shows "30 of 40", in a row apart from a
    seed that ran its whole 30 epochs (each cell re-derived from its run's files)."""
    monkeypatch.setattr(gen_results, "RUNS", tmp_path)
    fake_run(tmp_path / "whole", 0, 90.0, 100.0)
    fake_run(tmp_path / "short", 1, 80.0, 100.0)
    cfg_file = tmp_path / "short" / "config.yaml"
    cfg = yaml.safe_load(cfg_file.read_text())
    cfg["train"]["epochs"] = 40
    cfg_file.write_text(yaml.safe_dump(cfg))
    got = {r.seeds: r for r in gen_results.table() if r.recipe == "digits_moco.yaml"}
    for seed, run in (("0", "whole"), ("1", "short")):
        logged = max(json.loads(s)["epoch"] for s in
                     (tmp_path / run / "metrics.jsonl").read_text().splitlines())  # fmt: skip
        want = yaml.safe_load((tmp_path / run / "config.yaml").read_text())["train"]["epochs"]
        assert got[seed].epochs == (str(logged) if logged == want else f"{logged} of {want}")
    assert got["1"].epochs == "30 of 40" and got["1"].knn == "80.00 (1 seed)"


def test_a_run_of_uncommitted_code_is_marked_dirty_in_the_results_table(tmp_path, monkeypatch):
    """V03: the results table's commit cell says ``+dirty`` for runs of uncommitted code."""
    import json
    import shutil

    from tests.helpers.results_runs import fake_run, gen_results, rows

    runs, page, readme = tmp_path / "runs", tmp_path / "results.md", tmp_path / "README.md"
    shutil.copy(gen_results.README, readme)
    for name, value in (("RUNS", runs), ("PAGE", page), ("README", readme)):
        monkeypatch.setattr(gen_results, name, value)
    fake_run(runs / "digits_moco_s0", 0, 90.0, 100.0)
    prov_file = runs / "digits_moco_s0" / "provenance.json"
    prov_file.write_text(json.dumps({**json.loads(prov_file.read_text()), "dirty": True}))
    assert gen_results.main([]) == 0
    (row,) = [r for r in rows(page.read_text()) if r[0] == "`digits_moco.yaml`"]
    assert row[10] == "abcdef0+dirty"


def _correct(run: str, key: str):
    """One kept run's per-test-image correctness (``per_sample``: a string of 0/1)."""
    import numpy as np

    bits = json.loads((gen_results.RUNS / run / "eval" / "linear_eval.json").read_text())
    return np.array([c == "1" for c in bits["per_sample"][key]])


def test_the_mioc_ablation_statement_equals_a_numpy_rederivation_from_the_kept_logs():
    """MiOC − ablation on digits (seed-averaged, paired bootstrap over the test images, 1000
    resamples, percentile interval) and O's median share of the queue, re-derived from the kept
    eval JSONs and metrics.jsonl, are the numbers the results page and the MiOC page state."""
    import numpy as np

    seeds = (0, 1, 2)
    expected = []
    for label, key in (("kNN", "knn_top1"), ("linear", "linear_top1")):
        mioc = np.array([_correct(f"digits_mioc_s{s}", key) for s in seeds], float)
        queue = np.array([_correct(f"digits_mioc_queue_s{s}", key) for s in seeds], float)
        n = mioc.shape[1]
        idx = np.random.default_rng(0).integers(0, n, size=(1000, n))
        diffs = 100 * (mioc[:, idx].mean(axis=(0, 2)) - queue[:, idx].mean(axis=(0, 2)))
        low, high = np.percentile(diffs, [2.5, 97.5])
        point = 100 * (mioc.mean() - queue.mean())
        mark = " *" if low > 0 or high < 0 else ""
        expected.append(f"{label} {point:+.2f} [{low:+.2f}, {high:+.2f}]{mark}")
    shares = []
    for s in seeds:
        lines = (gen_results.RUNS / f"digits_mioc_s{s}" / "metrics.jsonl").read_text().split("\n")
        shares += [r["neg_inlier_fraction"] for r in map(json.loads, filter(None, lines))
                   if "neg_inlier_fraction" in r]  # fmt: skip
    assert shares, "the kept MiOC logs record no share of the queue in O"
    verdict = "a difference" if expected[0].endswith("*") else "no measurable difference"
    line = (f"- digits (seeds 0, 1, 2, 30 epochs): {verdict}: {expected[0]}; {expected[1]}; "
            f"O was a median {round(100 * float(np.median(shares)))}% of the queue.")  # fmt: skip
    recipe = (gen_results.PAGE.parent / "recipes" / "mioc.md").read_text()
    for text in (gen_results.PAGE.read_text(), recipe):
        assert line in text.splitlines()
        assert "- CIFAR-10: not run" in text


def test_getting_started_counts_the_kept_digits_mochi_runs():
    """Getting started's count of kept digits MoCHi runs is the number of their folders."""
    page = (gen_results.PAGE.parent / "getting-started.md").read_text()
    said = re.search(r"digits MoCHi has (\d+) kept runs, seeds (\d+) to (\d+)", page)
    assert said, "getting-started.md no longer counts the kept digits MoCHi runs"
    kept = sorted(gen_results.RUNS.glob("digits_mochi_s*/provenance.json"))
    seeds = sorted(int(p.parent.name.rsplit("_s", 1)[1]) for p in kept)
    assert (int(said[1]), int(said[2]), int(said[3])) == (len(kept), seeds[0], seeds[-1])
