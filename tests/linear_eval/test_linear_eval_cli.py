"""The ``python -m linear_eval`` command line, in process on tiny digits checkpoints: the default
JSON line, ``all`` (results, intervals, report and its PNGs), kappa sections, compare, AULC,
one-class runs, ID-vs-OOD sets, and exit statuses."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
import torch

from linear_eval.__main__ import main
from linear_eval.inputs.session import Options, Session
from pretrain.engine.monitor import extract
from pretrain.metrics import knn as pretrain_knn
from tests.helpers.fakeckpt import make_checkpoint
from tests.helpers.fakedata_eval import write_svhn
from tests.helpers.troubleshooting_quotes import assert_documented

pytestmark = pytest.mark.early  # among the suite's longest files: started first (tests/conftest.py)


def last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def intervals_everywhere(obj: object, path: str = "") -> list[str]:
    """Paths of every ``top1``/``top5``/``auroc`` number that lacks a sibling ``<key>_ci``."""
    missing = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ("top1", "top5", "auroc") and isinstance(v, float) and f"{k}_ci" not in obj:
                missing.append(f"{path}/{k}")
            missing += intervals_everywhere(v, f"{path}/{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            missing += intervals_everywhere(v, f"{path}/{i}")
    return missing


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("run"))


def test_default_command_prints_knn_and_linear_as_the_monitor_computes_them(ckpt, capsys):
    code = main(["--ckpt", str(ckpt), "--epochs", "2", "--milestones", "1"])
    assert code == 0
    out = last_json(capsys)
    assert {"knn_top1", "knn_top1_ci", "linear_top1", "linear_top1_ci", "linear_top5"} <= out.keys()
    sess = Session(ckpt, Options(cache=False))
    cfg = sess.model.cfg
    from pretrain import build

    bank, test = build.datasets_for(cfg).bank_loader, build.datasets_for(cfg).test_loader
    net = sess.model.encoder.backbone
    f, y = extract(net, bank, torch.device("cpu"))
    tf, ty = extract(net, test, torch.device("cpu"))
    ref = pretrain_knn.knn_top1(f, y, tf, ty, cfg.eval.knn_k, cfg.eval.knn_temperature, 10)
    assert out["knn_top1"] == pytest.approx(ref, abs=1e-9)
    assert (ckpt.parent.parent / "eval" / "linear_eval.json").exists()


def test_all_writes_every_result_with_intervals_and_a_report(ckpt, capsys):
    code = main(["all", "--ckpt", str(ckpt), "--crops", "1", "--draws", "2", "--seeds", "0"])
    assert code == 0, capsys.readouterr().err
    summary = last_json(capsys)
    run = ckpt.parent.parent
    for name in ("linear", "knn", "limited", "oneclass", "report"):
        record = json.loads((run / "eval" / f"{name}.json").read_text())
        assert intervals_everywhere(record) == [], name
    assert summary["linear_top1_ci"][0] <= summary["linear_top1"] <= summary["linear_top1_ci"][1]
    linear = json.loads((run / "eval" / "linear.json").read_text())  # the stated L2 and share ran
    assert summary["linear_l2"] == [s["l2"] for s in linear["solver"]]
    assert f"held-out {linear['solver'][0]['val_fraction']:.0%} " in summary["linear_protocol"]
    oneclass = json.loads((run / "eval" / "oneclass.json").read_text())
    assert oneclass["normal_sets"] == [[c] for c in range(10)]
    assert {"s_con", "s_shift", "s_ens", "maha_tied", "ocsvm", "kde"} <= oneclass[
        "detectors"
    ].keys()
    assert "kappa" in oneclass["skipped"]
    limited = json.loads((run / "eval" / "limited.json").read_text())
    assert [r["labels_per_class"] for r in limited["rows"]] == [10, 25, 50, 100]
    assert limited["skipped"] == [250, 500, 1000] and "smallest" in limited["note"]
    md = (run / "reports" / "report.md").read_text()
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert {
        "learning_curves.png",
        "tsne.png",
        "nn_margins.png",
        "limited_labels.png",
        "oneclass_auroc.png",
    } <= set(figures)
    for fig in figures:
        assert (run / "reports" / fig).read_bytes()[:4] == b"\x89PNG"
    for title in ("Linear probe", "kNN", "Limited labels", "One-class detection", "t-SNE"):
        assert f"## {title}" in md
    assert "κ" not in md  # no kappa head, no kappa section


def test_kappa_model_gets_kappa_detectors_analyses_and_report_sections(tmp_path, capsys):
    ckpt = make_checkpoint(tmp_path / "run", "kappa.hidden=16")
    args = ["--ckpt", str(ckpt)]
    assert main(["ood", *args, "--detectors", "s_con,kappa,knn_kappa"]) == 0
    assert main(["kappa", *args]) == 0
    kappa = json.loads((tmp_path / "run" / "eval" / "kappa.json").read_text())
    sev = kappa["severity"]
    assert set(sev["per_kind"]) == {"gaussian_noise", "gaussian_blur"}
    assert sorted(sev["mean_kappa_per_severity"]) == ["0", "1", "2", "3", "4", "5"]
    assert sev["n"] == 360 * 11 and "p_value" in kappa["correct_vs_wrong"]
    assert main(["report", *args]) == 0
    md = (tmp_path / "run" / "reports" / "report.md").read_text()
    assert "## κ: correct vs wrong predictions" in md and "## κ vs corruption severity" in md
    assert "| kappa " in md and "| knn_kappa " in md
    for fig in ("kappa_correct_vs_wrong.png", "kappa_vs_severity.png"):
        assert (tmp_path / "run" / "reports" / fig).exists()
    capsys.readouterr()


def test_compare_gives_paired_differences_of_the_two_checkpoints(ckpt, tmp_path, capsys):
    other = make_checkpoint(tmp_path / "other", seed=1)
    assert main(["compare", "--ckpt", str(ckpt), "--ckpt", str(other)]) == 0
    out = last_json(capsys)
    accs = []
    for path in (ckpt, other):
        s = Session(path, Options())
        tr, te = s.train(), s.test()
        accs.append(
            pretrain_knn.knn_top1(tr.backbone, tr.labels, te.backbone, te.labels, 200, 0.1, 10)
        )
    assert out["knn_top1"]["b_minus_a"] == pytest.approx(accs[1] - accs[0])  # B - A
    low, high = out["knn_top1"]["ci"]
    assert low <= out["knn_top1"]["b_minus_a"] <= high
    assert {"b_minus_a", "ci", "excludes_zero", "a_ci", "b_ci"} <= out["oneclass_s_con"].keys()
    assert intervals_everywhere(out) == [] and "a_ci" in out["linear_top1"]
    assert main(["report", "--ckpt", str(ckpt)]) == 0
    assert "## Checkpoint comparison" in (ckpt.parent.parent / "reports" / "report.md").read_text()
    assert main(["compare", "--ckpt", str(ckpt)]) == 2  # needs two


def test_aulc_over_a_glob_of_checkpoints(tmp_path, capsys):
    run = tmp_path / "run"
    make_checkpoint(run, global_step=10, name="epoch_1.pt")
    make_checkpoint(run, seed=3, global_step=20, name="epoch_2.pt")
    pattern = str(run / "checkpoints" / "epoch_*.pt")
    assert main(["ood", "--ckpt", pattern, "--detectors", "s_con,s_center"]) == 0
    out = last_json(capsys)
    for name in ("s_con", "s_center"):
        pts = out["detectors"][name]["points"]
        assert [p["global_step"] for p in pts] == [10, 20]
        assert out["detectors"][name]["aulc"] == pytest.approx(
            (pts[0]["auroc"] + pts[1]["auroc"]) / 2
        )
    assert (run / "eval" / "aulc.json").exists()


def test_one_class_run_is_evaluated_on_its_own_classes(tmp_path, capsys):
    ckpt = make_checkpoint(tmp_path / "run", "data.in_classes=[3]")
    assert main(["ood", "--ckpt", str(ckpt), "--detectors", "s_con,maha_tied"]) == 0
    out = last_json(capsys)
    assert out["normal_sets"] == [[3]] and list(out["detectors"]["s_con"]["per_set"]) == ["3"]


def test_id_vs_ood_datasets_and_a_missing_one(ckpt, tmp_path, capsys):
    write_svhn(tmp_path)
    args = ["ood", "--ckpt", str(ckpt), "--data-root", str(tmp_path), "--detectors", "s_con,knn+"]
    assert main([*args, "--ood-datasets", "svhn"]) == 0
    out = last_json(capsys)
    rec = out["detectors"]["s_con"]["per_set"]["svhn"]
    assert rec["n_id"] == 360 and rec["n_ood"] == 3 and "auroc_ci" in rec
    assert main([*args, "--ood-datasets", "svhn,isun"]) == 2
    assert "isun" in capsys.readouterr().err


def test_exit_statuses(tmp_path, ckpt, capsys):
    assert main(["--ckpt", str(tmp_path / "nope.pt")]) == 2  # a bad argument, as the README says
    assert main(["all", "--ckpt", str(tmp_path / "nope.pt")]) == 2
    assert "nope.pt does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"PK\x03\x04 not a zip")
    assert main(["knn", "--ckpt", str(bad)]) == 1
    assert "corrupt" in capsys.readouterr().err
    assert main(["ood", "--ckpt", str(ckpt), "--detectors", "odin"]) == 2
    assert "unknown detector" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["linear", "--ckpt", str(ckpt), "--protocol", "nope"])
    assert e.value.code == 2


def test_help_lists_every_subcommand(capsys):
    from linear_eval.cli.main import COMMANDS

    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for cmd in COMMANDS:
        assert re.search(rf"^\s+{cmd}\s+\S", text, re.M), cmd
    assert "without a subcommand" in text


def test_misspelt_subcommand_gets_did_you_mean(capsys):
    assert main(["lineer", "--ckpt", "x.pt"]) == 2
    assert "did you mean 'linear'?" in capsys.readouterr().err
    assert main(["zzzz"]) == 2
    err = capsys.readouterr().err
    assert "unknown subcommand 'zzzz'" in err and "did you mean" not in err


def test_unwritable_output_fails_before_any_feature(ckpt, tmp_path, monkeypatch, capsys):
    from linear_eval.inputs import features

    def boom(*a, **k):
        raise AssertionError("features computed before the output was checked")

    monkeypatch.setattr(features.FeatureStore, "features", boom)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["--ckpt", str(ckpt), "--out", str(blocker / "sub" / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "cannot be written" in err and str(blocker / "sub") in err


def test_unwritable_run_directory_fails_before_any_feature(ckpt, tmp_path, monkeypatch, capsys):
    import shutil

    from linear_eval.inputs import features

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(ckpt, run / "checkpoints" / "last.pt")
    (run / "eval").write_text("a file where the results directory should be")
    monkeypatch.setattr(features.FeatureStore, "features", lambda *a, **k: 1 / 0)
    assert main(["knn", "--ckpt", str(run / "checkpoints" / "last.pt")]) == 2
    assert "the results directory" in capsys.readouterr().err


def test_subcommands_print_a_summary_line_before_the_json(ckpt, capsys):
    assert main(["knn", "--ckpt", str(ckpt), "--presets", "cifar"]) == 0
    cap = capsys.readouterr()
    line = cap.err.strip().splitlines()[-1]
    assert line.startswith("knn: ") and "top1" in line and len(line) < 300
    rec = json.loads(cap.out.strip().splitlines()[-1])
    top1 = rec["variants"]["cifar"]["top1"]
    assert f"variants.cifar.top1 {top1:.2f}" in line


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_results_that_cannot_be_written_are_saved_elsewhere_and_named(
    ckpt, tmp_path, monkeypatch, capsys
):
    """``--out /dev/full``: the write fails after the whole evaluation; the results go to a
    temporary file that the error names (with the file that failed), and the status is 2."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["--ckpt", str(ckpt), "--epochs", "1", "--out", "/dev/full"]) == 2
    cap = capsys.readouterr()
    message = cap.err.strip().splitlines()[-1].removeprefix("error: ")
    found = re.fullmatch(
        r"cannot write the results to /dev/full \(No space left on device\); they were saved to "
        r"(\S+) instead",
        message,
    )
    assert found, message
    saved = Path(found[1])
    assert saved.parent == tmp_path
    record, printed = json.loads(saved.read_text()), json.loads(cap.out.strip().splitlines()[-1])
    assert record["knn_top1"] == printed["knn_top1"] and "per_sample" in record
    assert f"written to {saved}" in cap.err
    assert_documented(message)
