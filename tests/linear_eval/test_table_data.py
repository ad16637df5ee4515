"""``linear_eval table`` averages only seeds of one experiment: runs evaluated on another test
set, from a checkpoint of another training set, or with another kNN k or T are other rows (the
settings flagged as mixed probes are), and a row is paired with the baseline only on the
baseline's test set. The default command records the digests the table groups on."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from linear_eval.cli import main as cli
from pretrain.data import datasets, identity
from pretrain.runtime import checkpoint_io
from pretrain.testing.fakedata import random_images, write_png
from tests.helpers.eval_runs import N_TEST, make_run
from tests.helpers.fakeckpt import make_checkpoint
from tests.helpers.inproc import linear_eval


def edit_eval(run: Path, **fields: object) -> None:
    path = run / "eval" / "linear_eval.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | fields))


def digest(size: int, tag: str) -> dict:
    return {"size": size, "kind": "files", "sha256": tag * 64, "covers": identity.FILES_COVER}


def table(tmp_path: Path, *extra: str) -> list[dict[str, str]]:
    out = tmp_path / "t"
    assert cli.main(["table", str(tmp_path / "*_s*"), "--out", str(out), *extra]) == 0
    rows = list(csv.reader(out.with_suffix(".csv").open()))
    return [dict(zip(rows[0], r)) for r in rows[1:] if not r[0].startswith("(not")]


def seeds(tmp_path: Path, n: int = 2) -> list[Path]:
    rng = np.random.default_rng(0)
    return [
        make_run(tmp_path, f"moco_s{s}", loss="infonce", seed=s, correct=rng.random(N_TEST) < 0.6)
        for s in range(n)
    ]


def test_seeds_on_two_test_sets_are_two_rows(tmp_path):
    runs = seeds(tmp_path)
    edit_eval(runs[0], test_set=digest(N_TEST, "a"), train_set=digest(200, "c"))
    edit_eval(runs[1], test_set=digest(N_TEST, "b"), train_set=digest(200, "c"))
    rows = table(tmp_path)
    assert len(rows) == 2 and {r["seeds"] for r in rows} == {"1"}
    assert {r["test_set"] for r in rows} == {f"{N_TEST} images, sha256 {t * 12}" for t in "ab"}
    assert "train_set" not in rows[0]  # equal: not a column


def test_seeds_of_two_training_sets_are_two_rows(tmp_path):
    runs = seeds(tmp_path)
    for run, tag in zip(runs, "cd"):
        edit_eval(run, test_set=digest(N_TEST, "a"), train_set=digest(200, tag))
    rows = table(tmp_path)
    assert len(rows) == 2 and {r["train_set"] for r in rows} == {
        f"200 images, sha256 {t * 12}" for t in "cd"
    }


def test_seeds_evaluated_with_another_knn_k_are_two_rows_and_flagged(tmp_path, capsys):
    runs = seeds(tmp_path)
    for run, k in zip(runs, (5, 20)):
        edit_eval(run, knn={"k": k, "temperature": 0.1})
    rows = table(tmp_path)
    assert len(rows) == 2
    text = (tmp_path / "t.md").read_text()
    assert (
        "- knn_*: kNN of python -m linear_eval --ckpt (k 20, T 0.1); kNN of python -m "
        "linear_eval --ckpt (k 5, T 0.1) (the runs differ: not comparable)"
    ) in text


def test_a_row_on_another_test_set_is_not_paired_with_the_baseline(tmp_path):
    rng = np.random.default_rng(1)
    base = make_run(tmp_path, "moco_s0", loss="infonce", seed=0, correct=rng.random(N_TEST) < 0.6)
    other = make_run(tmp_path, "hard_s0", loss="hard", seed=0, correct=rng.random(N_TEST) < 0.9)
    same = make_run(tmp_path, "ring_s0", loss="ring", seed=0, correct=rng.random(N_TEST) < 0.9)
    for run, tag in ((base, "a"), (other, "b"), (same, "a")):
        edit_eval(run, test_set=digest(N_TEST, tag))
    rows = {r["loss.name"]: r for r in table(tmp_path, "--baseline", str(base))}
    assert rows["hard"]["knn_top1 vs baseline"] == "not paired: another test set"
    assert rows["ring"]["knn_top1 vs baseline"][0] in "+-"  # paired: a number


def test_the_default_command_records_the_train_and_test_sets(tmp_path):
    ckpt = make_checkpoint(tmp_path / "run", "eval.knn_k=2")
    state = checkpoint_io.load(ckpt)
    state["train_set"] = {"size": 3, "kind": "labels", "sha256": "f" * 64}
    checkpoint_io.save(state, ckpt)
    done = linear_eval("--ckpt", str(ckpt), "--epochs", "1", "--milestones", "1", "--no-cache")
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["train_set"] == state["train_set"]
    test = record["test_set"]
    assert test["size"] == record["test_size"] and len(test["sha256"]) == 64


def test_seeds_on_two_folders_with_the_same_file_names_are_two_rows(tmp_path):
    """Two image folders with the same file names and labels but other images: their digests
    (which cover the files' sizes) differ, so their seeds are not averaged; an old record (paths
    and labels only) is read and marked, never grouped with a new one."""
    folders = {}
    for tag, images in (("a", random_images(4, 16, seed=0)), ("b", np.zeros((4, 16, 16, 3)))):
        root = tmp_path / "data" / tag
        for i, img in enumerate(images.astype(np.uint8)):
            write_png(root / "train" / f"c{i % 2}" / f"{i}.png", img)
        ds = datasets.build("imagefolder", str(root), "train")
        folders[tag] = identity.train_set_identity(ds, root)
    runs = seeds(tmp_path, 3)
    edit_eval(runs[0], test_set=folders["a"])
    edit_eval(runs[1], test_set=folders["b"])
    old = {"size": 4, "kind": "files", "sha256": "c" * 64}  # as older code recorded it
    edit_eval(runs[2], test_set=old)
    rows = table(tmp_path)
    assert len(rows) == 3 and {r["seeds"] for r in rows} == {"1"}
    assert sorted(r["test_set"] for r in rows) == sorted(
        [f"4 images, sha256 {folders[t]['sha256'][:12]}" for t in "ab"]
        + [f"4 images, sha256 {old['sha256'][:12]} (paths and labels only)"]
    )
