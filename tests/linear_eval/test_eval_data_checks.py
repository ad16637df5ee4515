"""What linear_eval reads, as a careful user expects: every split labelled by the
training split's class names (the run's own image folders, ``folder:`` and CINIC-10), symbolic
links followed without entering a folder twice, a corrupt feature cache rebuilt with one warning,
and weights that are not finite refused by name."""

from __future__ import annotations

import builtins
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from linear_eval.cli.main import main
from linear_eval.inputs import checkpoints
from linear_eval.inputs.eval_datasets import build_eval_dataset
from linear_eval.inputs.features import FeatureStore
from pretrain.data import imagefiles
from pretrain.runtime import checkpoint_io
from tests.helpers.fakeckpt import make_checkpoint
from tests.helpers.fakedata_eval import write_cinic10, write_image_tree
from tests.helpers.folders import labels_by_folder

TRAIN_RELS = ["ant/1.png", "ant/2.png", "cat/1.png", "cat/2.png", "owl/1.png", "owl/2.png"]


def missing_warning(split: Path, absent: str, total: int = 3) -> str:
    return (
        f"warning: {split} has no images of 1 of the {total} training classes ({absent}); its "
        "images keep the training split's labels, and its accuracy covers the other classes"
    )


# --- splits labelled by the training split's class names -------------------------------


def test_run_image_folder_test_split_keeps_the_training_labels(tmp_path, capsys):
    write_image_tree(tmp_path / "data" / "train", TRAIN_RELS, seed=1)
    write_image_tree(tmp_path / "data" / "test", ["cat/9.png", "owl/9.png"], seed=2)  # no ant
    ckpt = make_checkpoint(
        tmp_path / "run", "data.name=imagefolder", f"data.root={tmp_path / 'data'}",
        "data.image_size=8", "data.eval_resize=8", "train.batch_size=4", "moco.queue_size=4",
    )  # fmt: skip
    store = FeatureStore(checkpoints.load_model(ckpt), None, torch.device("cpu"), batch_size=8)
    test = store.dataset("imagefolder", "test")
    assert test.classes == ["ant", "cat", "owl"]
    assert labels_by_folder(test) == [("cat", 1), ("owl", 2)]  # not 0 and 1
    assert store.features(None, "test").labels.tolist() == [1, 2]
    err = capsys.readouterr().err
    assert err.count(missing_warning(tmp_path / "data" / "test", "ant")) == 1, err


def test_a_run_on_image_lists_is_evaluated_on_its_own_lists(tmp_path):
    write_image_tree(tmp_path / "data" / "img", [f"{i}.png" for i in range(6)], seed=3)
    (tmp_path / "data" / "train").mkdir()  # a decoy: linear_eval read train/ before
    (tmp_path / "data" / "my_train.txt").write_text(
        "".join(f"img/{i}.png {i % 2}\n" for i in range(4))
    )
    (tmp_path / "data" / "my_test.txt").write_text("img/4.png 1\nimg/5.png 1\n")
    ckpt = make_checkpoint(
        tmp_path / "run", "data.name=imagefolder", f"data.root={tmp_path / 'data'}",
        "data.train_split=my_train.txt", "data.test_split=my_test.txt", "data.image_size=8",
        "data.eval_resize=8", "train.batch_size=4", "moco.queue_size=4",
    )  # fmt: skip
    store = FeatureStore(checkpoints.load_model(ckpt), None, torch.device("cpu"), batch_size=8)
    train, test = store.dataset("imagefolder", "train"), store.dataset("imagefolder", "test")
    assert [Path(p).name for p, _ in train.samples] == [f"{i}.png" for i in range(4)]
    assert train.targets == [0, 1, 0, 1] and test.targets == [1, 1]
    assert test.classes == ["0", "1"]


def test_folder_prefix_test_split_without_a_class_is_reported_once(tmp_path, capsys):
    write_image_tree(tmp_path / "train", TRAIN_RELS, seed=1)
    write_image_tree(tmp_path / "test", ["cat/9.png", "owl/9.png"], seed=2)
    ds = build_eval_dataset(f"folder:{tmp_path}", "unused", "test")
    assert labels_by_folder(ds) == [("cat", 1), ("owl", 2)]
    assert capsys.readouterr().err.count(missing_warning(tmp_path / "test", "ant")) == 1


def test_cinic10_test_split_without_a_class_keeps_the_training_labels(tmp_path, capsys):
    write_cinic10(tmp_path)
    shutil.rmtree(tmp_path / "cinic10" / "test" / "airplane")
    test = build_eval_dataset("cinic10", str(tmp_path), "test")
    assert [y for _, y in test.samples] == list(range(1, 10))  # airplane is class 0 in train
    assert labels_by_folder(test) == [(c, test.classes.index(c)) for c, _ in labels_by_folder(test)]
    err = capsys.readouterr().err
    assert err.count(missing_warning(tmp_path / "cinic10" / "test", "airplane", 10)) == 1, err
    write_image_tree(tmp_path / "cinic10" / "test", ["zebra/1.png"])
    with pytest.raises(ValueError, match=re.escape("class folders ['zebra']")):
        build_eval_dataset("cinic10", str(tmp_path), "test")


# --- symbolic links followed without entering a folder twice ---------------------------


def test_ood_folder_with_a_loop_reads_each_image_once(tmp_path, capsys):
    write_image_tree(tmp_path / "ood", ["a/1.png", "a/2.png", "b/3.png"])
    (tmp_path / "ood" / "a" / "back").symlink_to(tmp_path / "ood")
    (tmp_path / "ood" / "b" / "twice").symlink_to(tmp_path / "ood" / "a")
    ds = build_eval_dataset(f"imagefolder:{tmp_path / 'ood'}", "unused", "test")
    assert [f.relative_to(tmp_path / "ood").as_posix() for f in ds.files] == [
        "a/1.png", "a/2.png", "b/3.png",
    ]  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and f"{tmp_path / 'ood' / 'a' / 'back'} -> " in err


def test_labelled_folder_with_a_loop_keeps_its_labels(tmp_path, capsys):
    write_image_tree(tmp_path / "train", TRAIN_RELS, seed=1)
    write_image_tree(tmp_path / "test", ["cat/9.png"], seed=2)
    (tmp_path / "train" / "cat" / "up").symlink_to(tmp_path / "train")
    ds = build_eval_dataset(f"folder:{tmp_path}", "unused", "train")
    want = [(c, y) for y, c in enumerate(["ant", "cat", "owl"]) for _ in "12"]
    assert labels_by_folder(ds) == want
    assert f"{tmp_path / 'train' / 'cat' / 'up'} -> {tmp_path / 'train'}" in capsys.readouterr().err


# --- a corrupt feature cache is rebuilt with one warning -------------------------------


def test_a_truncated_cache_file_is_rebuilt_with_one_warning(tmp_path, capsys):
    model = checkpoints.load_model(make_checkpoint(tmp_path / "run"))
    cache = tmp_path / "run" / "features"
    fresh = FeatureStore(model, cache, torch.device("cpu"), batch_size=512).features(None, "test")
    (path,) = cache.glob("digits-test-plain-*.pt")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    capsys.readouterr()
    store = FeatureStore(model, cache, torch.device("cpu"), batch_size=512)
    again = store.features(None, "test")
    assert torch.equal(again.backbone, fresh.backbone) and torch.equal(again.head, fresh.head)
    assert torch.equal(again.labels, fresh.labels)
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and err.startswith(
        f"warning: the feature cache file {path} is corrupt ("
    ), err
    assert err.rstrip().endswith("; extracting the features again and rewriting it"), err
    reread = torch.load(path, weights_only=True)["features"]  # rewritten whole
    assert torch.equal(reread["backbone"], fresh.backbone)


def test_a_cache_file_of_another_layout_is_rebuilt(tmp_path, capsys):
    model = checkpoints.load_model(make_checkpoint(tmp_path / "run"))
    cache = tmp_path / "run" / "features"
    store = FeatureStore(model, cache, torch.device("cpu"), batch_size=512)
    fresh = store.features(None, "test")
    (path,) = cache.glob("digits-test-plain-*.pt")
    checkpoint_io.save({"something": torch.zeros(2)}, path)
    again = FeatureStore(model, cache, torch.device("cpu"), batch_size=512).features(None, "test")
    assert torch.equal(again.backbone, fresh.backbone)
    assert f"warning: the feature cache file {path} is corrupt (" in capsys.readouterr().err


# --- weights that are not finite -------------------------------------------------------


def test_weights_that_are_not_finite_are_refused_by_name(tmp_path):
    ckpt = make_checkpoint(tmp_path / "run")
    state = torch.load(ckpt, weights_only=True)
    key = next(k for k in state["model"] if k.startswith("encoder_q.") and k.endswith("weight"))
    state["model"][key][0] = float("nan")
    checkpoint_io.save(state, ckpt)
    name = key.removeprefix("encoder_q.")
    message = (
        f"checkpoint {ckpt} holds weights that are not finite (NaN or inf) in 1 tensor(s): "
        f"{name}; features of these weights mean nothing: evaluate an earlier checkpoint"
    )
    with pytest.raises(checkpoint_io.CheckpointError, match=re.escape(message)):
        checkpoints.load_model(ckpt)


def test_weights_that_are_not_finite_end_linear_eval_with_exit_1(tmp_path, capsys):
    ckpt = make_checkpoint(tmp_path / "run")
    state = torch.load(ckpt, weights_only=True)
    key = next(k for k in state["model"] if k.endswith("running_var"))
    state["model"][key].fill_(float("inf"))
    checkpoint_io.save(state, ckpt)
    assert main(["knn", "--ckpt", str(ckpt), "--no-cache"]) == 1
    err = capsys.readouterr().err
    assert "holds weights that are not finite" in err and "frozen encoder changed" not in err


# --- the evaluation sets' loader -------------------------------------------


def test_an_unreadable_evaluation_image_is_named_and_ends_the_run_with_exit_1(
    tmp_path, monkeypatch, capsys
):
    write_image_tree(tmp_path / "data" / "train", TRAIN_RELS, seed=1)
    write_image_tree(tmp_path / "data" / "test", TRAIN_RELS, seed=2)
    ckpt = make_checkpoint(
        tmp_path / "run", "data.name=imagefolder", f"data.root={tmp_path / 'data'}",
        "data.image_size=8", "data.eval_resize=8", "train.batch_size=4", "moco.queue_size=4",
    )  # fmt: skip
    denied = tmp_path / "data" / "test" / "cat" / "2.png"
    real_open = builtins.open

    def fake_open(p, *a, **k):  # root reads chmod 000 files: emulate the denial
        if isinstance(p, (str, os.PathLike)) and os.fspath(p) == str(denied):
            raise PermissionError(13, "Permission denied", str(denied))
        return real_open(p, *a, **k)

    monkeypatch.setattr(builtins, "open", fake_open)
    assert main(["knn", "--ckpt", str(ckpt), "--no-cache"]) == 1
    err = capsys.readouterr().err
    assert (
        f"error: cannot read image {denied}: permission denied; give the user running negmine "
        "read rights on it (chmod a+r); fix or remove the file"
    ) in err, err
    ood = build_eval_dataset(f"imagefolder:{tmp_path / 'data' / 'test'}", "unused", "test")
    with pytest.raises(imagefiles.BadImageError, match="permission denied"):
        ood[3]


def test_evaluation_folders_read_16_bit_images_by_the_top_byte(tmp_path):
    write_image_tree(tmp_path / "train", TRAIN_RELS, seed=1)
    write_image_tree(tmp_path / "test", ["cat/1.png"], seed=2)
    grey = np.random.default_rng(0).integers(0, 65536, (6, 5), dtype=np.uint16)
    Image.fromarray(grey).save(tmp_path / "test" / "cat" / "1.png")  # a 16-bit PNG
    got = np.asarray(build_eval_dataset(f"folder:{tmp_path}", "unused", "test")[0][0])
    np.testing.assert_array_equal(got, np.repeat((grey >> 8).astype(np.uint8)[..., None], 3, 2))


def test_linear_eval_with_a_truncated_cache_warns_and_succeeds(tmp_path, capsys):
    ckpt = make_checkpoint(tmp_path / "run")
    assert main(["knn", "--ckpt", str(ckpt)]) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    files = sorted((tmp_path / "run" / "features").glob("*.pt"))
    assert files
    for f in files:
        f.write_bytes(f.read_bytes()[:100])
    assert main(["knn", "--ckpt", str(ckpt)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.strip().splitlines()[-1]) == first
    assert captured.err.count("warning: the feature cache file") == len(files)
