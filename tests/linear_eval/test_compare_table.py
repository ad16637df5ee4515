"""``compare`` and ``table`` tell the same story: one sign convention (B - A,
run - baseline), the linear probe named in every output, and compare's summary line holding the
numbers and the file it wrote. With the same probe (``compare --protocol moco`` is the default
command's SGD probe) the two give the same differences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from linear_eval.__main__ import main
from tests.helpers.fakeckpt import make_checkpoint


def run_folder(root: Path, seed: int, *overrides: str) -> Path:
    """A finished run folder as table reads it: the checkpoint and its config.yaml."""
    ckpt = make_checkpoint(root, *overrides, seed=seed)
    cfg = torch.load(ckpt, weights_only=True)["config"]
    (root / "config.yaml").write_text(yaml.safe_dump(cfg))
    return ckpt


def test_compare_and_table_agree_on_sign_probe_and_numbers(tmp_path, capsys):
    a = run_folder(tmp_path / "runs" / "a", seed=0)
    b = run_folder(tmp_path / "runs" / "b", 1, "moco.temperature=0.25")  # its own table row
    for ckpt in (a, b):  # the default command (kNN, SGD probe = moco's recipe): what table reads
        assert main(["--ckpt", str(ckpt)]) == 0, capsys.readouterr().err
    evals = [json.loads((c.parents[1] / "eval" / "linear_eval.json").read_text()) for c in (a, b)]
    capsys.readouterr()

    assert main(["compare", "--ckpt", str(a), "--ckpt", str(b), "--protocol", "moco"]) == 0
    err, out = capsys.readouterr()[::-1]
    record = json.loads(out.strip().splitlines()[-1])
    lin, near = record["linear_top1"], record["knn_top1"]
    # B - A, from the default command's own numbers of each checkpoint
    assert lin["a"] == pytest.approx(evals[0]["linear_top1"])
    assert lin["b"] == pytest.approx(evals[1]["linear_top1"])
    assert lin["b_minus_a"] == pytest.approx(lin["b"] - lin["a"])
    assert near["b_minus_a"] == pytest.approx(evals[1]["knn_top1"] - evals[0]["knn_top1"])
    assert record["linear_probe"]["name"] == "moco" and record["linear_probe"]["solver"] == "sgd"
    written = a.parent.parent / "eval" / "compare.json"
    assert record["written_to"] == str(written) and written.exists()
    line = err.strip().splitlines()[-1]
    assert line.startswith("compare (B-A, A the reference")
    want = f"linear (moco) top-1: A {lin['a']:.2f}, B {lin['b']:.2f}, B-A {lin['b_minus_a']:+.2f}"
    assert want in line
    assert f"written to {written}" in line

    assert main(["table", str(tmp_path / "runs" / "*"), "--baseline", str(a.parent.parent)]) == 0
    text = capsys.readouterr().out
    row = next(r for r in text.splitlines() if r.startswith("| b "))
    header = next(r for r in text.splitlines() if r.startswith("| config "))
    cells = dict(zip(header.split(" | "), row.split(" | ")))
    assert cells["linear_top1 vs baseline"].startswith(f"{lin['b_minus_a']:+.2f} ")
    assert cells["knn_top1 vs baseline"].startswith(f"{near['b_minus_a']:+.2f} ")
    assert "- linear_*: SGD probe of python -m linear_eval --ckpt (features, 100 epochs" in text
    assert text.startswith("linear probe: SGD probe of python -m linear_eval --ckpt (features")
    assert "- vs baseline: run - baseline (as compare's B - A)" in text


def test_compare_defaults_to_the_default_commands_probe_and_names_it_first(tmp_path, capsys):
    """compare's default probe is the one the default command (and so table) reports: the SGD
    probe of moco's recipe, named on compare's first line as table names it on its own."""
    a = make_checkpoint(tmp_path / "a", seed=0)
    b = make_checkpoint(tmp_path / "b", seed=1)
    assert main(["compare", "--ckpt", str(a), "--ckpt", str(b)]) == 0
    err, out = capsys.readouterr()[::-1]
    record = json.loads(out.strip().splitlines()[-1])
    assert record["linear_probe"]["name"] == "moco" and record["linear_probe"]["solver"] == "sgd"
    assert [x for x in err.splitlines() if x.startswith("linear probe: ")] == [
        "linear probe: SGD, moco recipe (python -m linear_eval --ckpt's default)"
    ]
    assert "linear (moco) top-1: A " in err and "one-class s_con AUROC: A " in err
    assert record["oneclass_s_con"]["b_minus_a"] == pytest.approx(
        record["oneclass_s_con"]["b"] - record["oneclass_s_con"]["a"], abs=1e-6
    )
