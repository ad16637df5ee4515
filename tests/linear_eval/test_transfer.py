"""Transfer: the seed resizing of another dataset through the frozen backbone (checked against a
direct torchvision pipeline), the record, and a missing dataset as a clear exit-2 error before any
extraction."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torchvision.transforms import v2

from linear_eval.__main__ import main
from linear_eval.classify import evaluate as classification
from linear_eval.classify import probe, transfer
from linear_eval.inputs.session import Options, Session
from pretrain.testing.fakedata import write_cifar10
from tests.helpers.fakeckpt import make_checkpoint
from tests.helpers.fakedata_eval import write_image_tree


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    arrays = write_cifar10(root, per_batch=4, test=8)
    ckpt = make_checkpoint(tmp_path_factory.mktemp("run"))
    return root, arrays, ckpt


def test_transfer_features_use_the_seed_resizing_and_the_run_normalisation(setup):
    root, arrays, ckpt = setup
    sess = Session(ckpt, Options(data_root=str(root)))
    record = classification.run_transfer(sess, ["cifar10"], seeds=[0])
    rec = record["datasets"]["cifar10"]
    assert rec["train_size"] == 20 and rec["test_size"] == 8 and rec["num_classes"] == 10
    assert {"top1", "top1_ci"} <= rec["linear"].keys() and "top1_ci" in rec["knn"]["cifar"]
    d = sess.model.cfg.data
    ref_tf = v2.Compose(
        [
            v2.ToImage(),
            v2.Resize(224, antialias=True),  # seed protocol: 32-px CIFAR upsampled to 224
            v2.CenterCrop(224),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(d.mean, d.std),
        ]
    )
    x = torch.stack([ref_tf(torch.from_numpy(a).permute(2, 0, 1)) for a in arrays["test"][:3]])
    with torch.no_grad():
        ref = sess.model.encoder.backbone(x)
    got = sess.features("test", "cifar10", transform="transfer")
    torch.testing.assert_close(got.backbone[:3], ref, rtol=1e-4, atol=1e-4)
    assert got.labels.tolist() == arrays["test_y"]
    written = json.loads((sess.eval_dir / "transfer.json").read_text())
    assert written["datasets"]["cifar10"]["linear"]["top1"] == pytest.approx(rec["linear"]["top1"])


def test_a_missing_dataset_exits_2_naming_its_path_before_extracting(setup, tmp_path, capsys):
    root, _, _ = setup
    ckpt = make_checkpoint(tmp_path / "run")
    code = main(
        ["transfer", "--ckpt", str(ckpt), "--data-root", str(root), "--datasets", "cifar10,stl10"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "stl10_binary" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "features").exists()  # cifar10 was not extracted first
    code = main(["transfer", "--ckpt", str(ckpt), "--data-root", str(root), "--datasets", "pets"])
    assert code == 2 and "oxford-iiit-pet" in capsys.readouterr().err


def test_cli_transfer_on_a_labelled_image_folder(tmp_path, capsys):
    """``--datasets folder:<path>``: labels from the class folders, resize 256 + centre crop 224
    with the run's normalisation (a direct torchvision pipeline), and the record's sizes."""
    classes = ["ant", "bee", "cat"]
    train_rels = [f"{c}/{i}.png" for c in classes for i in range(3)]
    test_rels = ["cat/0.png", "ant/0.png", "cat/1.png"]  # no bee: labels keep train's indices
    write_image_tree(tmp_path / "data" / "train", train_rels, seed=1)
    test_images = write_image_tree(tmp_path / "data" / "test", test_rels, seed=2)
    ckpt = make_checkpoint(tmp_path / "run")
    name = f"folder:{tmp_path / 'data'}"
    assert main(["transfer", "--ckpt", str(ckpt), "--datasets", name]) == 0
    capsys.readouterr()
    rec = json.loads((tmp_path / "run" / "eval" / "transfer.json").read_text())["datasets"][name]
    assert (rec["train_size"], rec["test_size"], rec["num_classes"]) == (9, 3, 3)
    sess = Session(ckpt, Options())
    got = sess.features("test", name, transform="transfer")  # the CLI's cached features
    assert got.labels.tolist() == [classes.index(r.split("/")[0]) for r in sorted(test_rels)]
    d = sess.model.cfg.data
    ref_tf = v2.Compose(
        [
            v2.ToImage(),
            v2.Resize(256, antialias=True),
            v2.CenterCrop(224),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(d.mean, d.std),
        ]
    )
    x = torch.stack([ref_tf(torch.from_numpy(a).permute(2, 0, 1)) for a in test_images])
    with torch.no_grad():
        ref = sess.model.encoder.backbone(x)
    torch.testing.assert_close(got.backbone, ref, rtol=1e-4, atol=1e-4)


def test_evaluate_on_features_matches_a_numpy_knn_and_rejects_unlabelled_sets():
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((3, 5)) * 2
    y, ty = np.arange(45) % 3, np.arange(30) % 3
    x = torch.from_numpy(centres[y] + rng.standard_normal((45, 5)))
    tx = torch.from_numpy(centres[ty] + rng.standard_normal((30, 5)))
    y, ty = torch.from_numpy(y), torch.from_numpy(ty)
    rec = transfer.evaluate(x, y, tx, ty, probe.PROTOCOLS["lbfgs"], seeds=[0, 1])
    xn = (x / x.norm(dim=1, keepdim=True)).numpy()
    tn = (tx / tx.norm(dim=1, keepdim=True)).numpy()
    sim = tn @ xn.T  # k = 200 > 45: every bank row votes exp(sim / 0.1)
    votes = np.stack([np.exp(sim / 0.1)[:, y.numpy() == c].sum(1) for c in range(3)], 1)
    assert rec["knn"]["cifar"]["top1"] == pytest.approx(
        100 * np.mean(votes.argmax(1) == ty.numpy())
    )
    assert rec["linear"]["runs"] == 2 and rec["num_classes"] == 3
    with pytest.raises(ValueError, match="labelled"):
        transfer.evaluate(x, y, tx, -torch.ones_like(ty), probe.PROTOCOLS["lbfgs"])
