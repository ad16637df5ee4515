"""``python -m linear_eval openood`` on a tiny OpenOOD-format tree built here: groups, skipped
sets, OpenOOD's preprocessing and both FPR@95 conventions against torchvision-v1 transforms, numpy
and scikit-learn re-derivations."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve
from torchvision import transforms as T

from linear_eval.__main__ import main
from linear_eval.inputs.session import Options, Session
from linear_eval.report import document
from tests.helpers.fakeckpt import make_checkpoint

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def _write(root: Path, rel: str, rgb: tuple[int, int, int], seed: int, size: int = 40) -> None:
    rng = np.random.default_rng(seed)
    img = np.clip(np.array(rgb) + rng.normal(0, 40, (size, size + 4, 3)), 0, 255).astype(np.uint8)
    p = root / "images_classic" / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(p)


def build_tree(root: Path) -> None:
    lists = root / "benchmark_imglist" / "cifar10"
    lists.mkdir(parents=True)
    colours = [(200, 40, 40), (40, 200, 40)]
    seed = 0
    for split, n in (("train", 30), ("test", 12)):
        lines = []
        for c, rgb in enumerate(colours):
            for i in range(n):
                rel = f"cifar10/{split}/c{c}/{i}.png"
                _write(root, rel, rgb, seed := seed + 1)
                lines.append(f"{rel} {c}")
        (lists / f"{split}_cifar10.txt").write_text("\n".join(lines) + "\n")
    for name, rgb in (("cifar100", (120, 120, 40)), ("mnist", (20, 20, 220)), ("svhn", (0, 0, 0))):
        lines = []
        for i in range(10):
            rel = f"{name}/test/{i}.png"
            if name != "svhn" or i:  # svhn's first image is missing: the set is skipped
                _write(root, rel, rgb, seed := seed + 1)
            lines.append(f"{rel} -1")
        (lists / f"test_{name}.txt").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("openood")
    build_tree(base / "data")
    return base / "data", make_checkpoint(base / "run")


def _reference_features(sess: Session, root: Path, list_name: str) -> np.ndarray:
    tf = T.Compose(
        [
            T.Resize(32, interpolation=T.InterpolationMode.BILINEAR),
            T.CenterCrop(32),
            T.ToTensor(),
            T.Normalize(MEAN, STD),
        ]
    )
    lines = (root / "benchmark_imglist" / "cifar10" / list_name).read_text().split("\n")
    x = torch.stack(
        [
            tf(Image.open(root / "images_classic" / ln.split()[0]).convert("RGB"))
            for ln in lines
            if ln
        ]
    )
    with torch.no_grad():
        return sess.model.encoder.eval().backbone(x).double().numpy()


def _knn_score(bank: np.ndarray, test: np.ndarray, k: int = 50) -> np.ndarray:
    b = bank / np.linalg.norm(bank, axis=1, keepdims=True)
    t = test / np.linalg.norm(test, axis=1, keepdims=True)
    d = np.sqrt(((t[:, None, :] - b[None, :, :]) ** 2).sum(-1))
    return -np.sort(d, axis=1)[:, k - 1]


def _fpr_at_95(pos: np.ndarray, neg: np.ndarray) -> float:
    """Fraction of negatives above the threshold at which 95 % of positives are caught."""
    y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    fpr, tpr, _ = roc_curve(y, np.r_[pos, neg])
    return 100.0 * fpr[np.argmax(tpr >= 0.95)]


def test_openood_cifar10_against_references(setup, capsys):
    root, ckpt = setup
    args = ["openood", "--ckpt", str(ckpt), "--benchmark", "cifar10", "--root", str(root)]
    assert main([*args, "--no-cache"]) == 0
    cap = capsys.readouterr()
    rec = json.loads(cap.out.strip().splitlines()[-1])
    assert cap.err.strip().splitlines()[-1].startswith("openood: ")
    assert rec["groups"] == {
        "near": ["cifar100", "tin"],
        "far": ["mnist", "svhn", "texture", "places365"],
    }
    assert set(rec["skipped"]) == {"tin", "svhn", "texture", "places365"}
    assert "missing" in rec["skipped"]["svhn"] and "test_tin.txt" in rec["skipped"]["tin"]
    assert rec["sizes"] == {"train": 60, "test": 24, "cifar100": 10, "mnist": 10}

    sess = Session(ckpt, Options(cache=False))
    bank = _reference_features(sess, root, "train_cifar10.txt")
    test = _reference_features(sess, root, "test_cifar10.txt")
    s_id = _knn_score(bank, test)
    knn = rec["detectors"]["knn"]
    for name in ("cifar100", "mnist"):
        s_ood = _knn_score(bank, _reference_features(sess, root, f"test_{name}.txt"))
        y = np.r_[np.ones(len(s_id)), np.zeros(len(s_ood))]
        got = knn["per_set"][name]
        assert got["AUROC"] == pytest.approx(100 * roc_auc_score(y, np.r_[s_id, s_ood]), abs=1e-6)
        aupr_in = 100 * average_precision_score(y, np.r_[s_id, s_ood])
        aupr_out = 100 * average_precision_score(1 - y, -np.r_[s_id, s_ood])
        assert got["AUPR_IN"] == pytest.approx(aupr_in, abs=1e-6)
        assert got["AUPR_OUT"] == pytest.approx(aupr_out, abs=1e-6)
        assert got["FPR@95"] == pytest.approx(_fpr_at_95(-s_ood, -s_id), abs=1e-6)  # OOD positive
        assert got["FPR@95_ID+"] == pytest.approx(_fpr_at_95(s_id, s_ood), abs=1e-6)
    assert knn["nearood"]["AUROC"] == pytest.approx(knn["per_set"]["cifar100"]["AUROC"])
    assert knn["farood"]["AUROC"] == pytest.approx(knn["per_set"]["mnist"]["AUROC"])

    # ID accuracy of the weighted kNN classifier (k 200 > N: every bank row votes), by numpy
    b = bank / np.linalg.norm(bank, axis=1, keepdims=True)
    t = test / np.linalg.norm(test, axis=1, keepdims=True)
    w = np.exp((t @ b.T) / 0.1)
    labels_b, labels_t = np.repeat([0, 1], 30), np.repeat([0, 1], 12)
    votes = np.stack([w[:, labels_b == c].sum(1) for c in (0, 1)], 1)
    assert rec["id_acc"] == pytest.approx(100 * (votes.argmax(1) == labels_t).mean(), abs=1e-6)

    rows = list(csv.reader((sess.eval_dir / "openood_cifar10_knn.csv").open()))
    assert rows[0] == ["dataset", "FPR@95", "AUROC", "AUPR_IN", "AUPR_OUT", "ACC", "FPR@95_ID+"]
    assert [r[0] for r in rows[1:]] == ["cifar100", "nearood", "mnist", "farood"]
    assert float(rows[1][2]) == pytest.approx(knn["per_set"]["cifar100"]["AUROC"], abs=0.006)

    sections = document.openood_sections(sess.eval_dir, "")
    assert sections[0]["title"] == "OpenOOD: cifar10" and "Skipped: tin" in sections[0]["text"]
    assert {s["title"] for s in sections[1:]} >= {
        "OpenOOD cifar10: knn",
        "OpenOOD cifar10: maha_tied",
    }


def test_openood_missing_id_set_is_an_error_naming_the_path(setup, tmp_path, capsys):
    _, ckpt = setup
    args = ["openood", "--ckpt", str(ckpt), "--benchmark", "cifar10", "--root", str(tmp_path)]
    assert main([*args, "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "benchmark_imglist" / "cifar10" / "train_cifar10.txt") in err
