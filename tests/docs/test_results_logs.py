"""The kept logs carry no path of the measuring machine: ``scripts/gen_results.py`` refuses a log
with an absolute path under a home or work directory, ``--keep RUN NAME`` copies a run with its
paths made relative to the run folder (the data root a placeholder), and no page or kept log in
the repository names such a path."""

from __future__ import annotations

import json
import re
import sys

import pytest
import yaml

from tests.helpers.paths import ROOT
from tests.helpers.results_runs import fake_run

sys.path.insert(0, str(ROOT / "scripts"))
import gen_results  # noqa: E402
import results_logs  # noqa: E402
import results_recipes  # noqa: E402


def test_a_log_with_a_machine_path_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(gen_results, "RUNS", tmp_path)
    fake_run(tmp_path / "x", 0, 90.0, 100.0)
    assert results_logs.machine_paths(tmp_path / "x") == []
    cfg = tmp_path / "x" / "config.yaml"
    cfg.write_text(cfg.read_text().replace("out_dir: runs/digits_moco", "out_dir: /home/me/r"))
    with pytest.raises(ValueError, match=r"x: a path of the measuring machine .*/home/me/r"):
        gen_results.table()


@pytest.mark.parametrize(
    "kept", ["eval/oneclass.json", "eval/linear_eval_random.json", "eval/compare.json", "notes.txt"]
)
def test_a_machine_path_in_any_kept_file_is_refused(tmp_path, monkeypatch, kept):
    """Every file kept under a run is checked: the optional evaluations (oneclass,
    linear_eval_random) and a file put there by hand as the four."""
    monkeypatch.setattr(gen_results, "RUNS", tmp_path)
    fake_run(tmp_path / "x", 0, 90.0, 100.0)
    (tmp_path / "x" / kept).write_text(json.dumps({"checkpoint": "/work/me/r/last.pt"}))
    assert results_logs.machine_paths(tmp_path / "x") == [f"{kept}: /work/me/r/last.pt"]
    with pytest.raises(ValueError, match=rf"x: a path of the measuring machine .*\({kept}: /work"):
        gen_results.table()


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('"command": "/root/.pyenv/bin/python3 -m pretrain"', ["/root/.pyenv/bin/python3"]),
        ("out_dir: /work/runs/x", ["/work/runs/x"]),
        ('"checkpoint": "/tmp/r/last.pt"', ["/tmp/r/last.pt"]),
        ("https://example.org/home/x and docs/work/y and ~/tmp", []),
    ],
)
def test_the_pattern_finds_home_and_work_paths_only(text, found):
    assert [m.group(0) for m in results_logs.MACHINE_PATH.finditer(text)] == found


def test_keep_makes_the_paths_relative_to_the_run_folder(tmp_path):
    run, data = tmp_path / "runs" / "r0", tmp_path / "data" / "cifar"
    fake_run(run, 0, 90.0, 100.0)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["out_dir"], cfg["data"]["root"] = str(run), str(data)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    prov = json.loads((run / "provenance.json").read_text())
    prov["segments"][0]["command"] = (f"/usr/local/bin/python3 -m pretrain --cfg digits_moco.yaml "
                                      f"data.root={data} out_dir={run}")  # fmt: skip
    (run / "provenance.json").write_text(json.dumps(prov))
    ev = json.loads((run / "eval" / "linear_eval.json").read_text())
    (run / "eval" / "linear_eval.json").write_text(
        json.dumps({**ev, "checkpoint": f"{run}/checkpoints/last.pt"})
    )
    dest = tmp_path / "kept" / "r0"
    assert results_logs.keep(run, dest) == []
    kept = yaml.safe_load((dest / "config.yaml").read_text())
    assert (kept["out_dir"], kept["data"]["root"]) == (".", "DATA_ROOT")
    command = json.loads((dest / "provenance.json").read_text())["segments"][0]["command"]
    assert command == "python3 -m pretrain --cfg digits_moco.yaml data.root=DATA_ROOT out_dir=."
    checkpoint = json.loads((dest / "eval" / "linear_eval.json").read_text())["checkpoint"]
    assert checkpoint == "checkpoints/last.pt"
    assert (dest / "metrics.jsonl").read_text() == (run / "metrics.jsonl").read_text()
    assert not (dest / "eval" / "linear_eval_random.json").exists()  # optional: not made up
    (run / "eval" / "linear_eval_random.json").write_text(
        json.dumps({**ev, "checkpoint": f"{run}/checkpoints/last.pt", "weights": "random"})
    )
    assert results_logs.keep(run, tmp_path / "kept" / "r1") == []
    random = json.loads((tmp_path / "kept" / "r1" / "eval" / "linear_eval_random.json").read_text())
    assert random["checkpoint"] == "checkpoints/last.pt" and random["weights"] == "random"


def test_no_kept_log_or_page_names_a_machine_path():
    runs = sorted(p.parent for p in gen_results.RUNS.glob("*/provenance.json"))
    assert runs and all(results_logs.machine_paths(r) == [] for r in runs)
    for run in runs:  # the host's name is kept
        assert json.loads((run / "provenance.json").read_text())["host"]
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    home = re.compile(r"(?<![\w.~:/-])/(?:home|root|work)/\S+")
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in pages
             for m in home.finditer(p.read_text())]  # fmt: skip
    assert not found, found


def test_a_recipe_page_includes_its_configs_rows_and_a_hand_edit_fails_the_check(
    tmp_path, monkeypatch
):
    import shutil

    (tmp_path / "recipes").mkdir()
    page = tmp_path / "recipes" / "moco.md"
    shutil.copy(gen_results.PAGE.parent / "recipes" / "moco.md", page)
    shutil.copy(gen_results.README, tmp_path / "README.md")
    monkeypatch.setattr(gen_results, "PAGE", tmp_path / "results.md")
    monkeypatch.setattr(gen_results, "README", tmp_path / "README.md")
    assert gen_results.main([]) == 0 and gen_results.main(["--check"]) == 0
    results = (tmp_path / "results.md").read_text()
    block = page.read_text().split(results_recipes.BEGIN)[1].split(results_recipes.END)[0]
    for name in results_recipes.page_configs(page.read_text()):  # every named config, as results
        mine = [s for s in block.splitlines() if s.startswith(f"| `{name}` |")]
        theirs = [s for s in results.splitlines() if s.startswith(f"| `{name}` |")]
        assert len(mine) == len(theirs) >= 1, name
        assert [re.sub(r"\[\d+\]|\.\./", "", s) for s in mine] == [
            re.sub(r"\[\d+\]", "", s) for s in theirs
        ]
    text = page.read_text()  # a hand edit of the first mean in the block: one point up
    edited = re.sub(r"\| (\d+\.\d\d) ± ", lambda m: f"| {float(m[1]) + 1:.2f} ± ", text, count=1)
    assert edited != text
    page.write_text(edited)
    assert gen_results.main(["--check"]) == 1


def test_each_row_names_the_papers_figure_or_says_there_is_none():
    from pretrain import config

    def figure(name):
        return results_recipes.paper_figure(name, config.load(name))

    assert "82.58 % at 200 epochs" in figure("cifar10_moco.yaml")
    assert "85.3 % at 200 epochs" in figure("cifar10_moco_sym.yaml")
    assert figure("digits_mioc.yaml").startswith("no paper figure at this scale")
    assert "references.md#jain2025mioc" in figure("cifar10_mioc.yaml")
    assert "references.md#li2024vmf" in figure("cifar10_kappa.yaml")
    for path in sorted(config.CONFIG_DIR.glob("*.yaml")):
        assert figure(path.name)
