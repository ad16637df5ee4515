"""docs/troubleshooting.md quotes the data messages word for word: each message is
produced by the code here and must match one quoted message of the page, whose capitalised
placeholders (DIR, PATH, N, ...) stand for any text."""

from __future__ import annotations

import pytest
import torch

from linear_eval.inputs import checkpoints, features
from pretrain.data import imagefiles
from pretrain.runtime import checkpoint_io
from pretrain.testing.fakedata import random_images, write_png
from tests.helpers.folders import TRAIN, deny, write_split
from tests.helpers.troubleshooting_quotes import as_regex, assert_documented, warning_of


def test_placeholders_stand_for_text_and_nothing_else():
    assert as_regex("cannot list folder DIR: permission denied").fullmatch(
        "cannot list folder /a/b: permission denied"
    )
    assert not as_regex("cannot list folder DIR: permission denied").fullmatch(
        "cannot list folder /a/b: access denied"
    )


def test_split_and_link_messages_are_quoted(tmp_path, capsys):
    write_split(tmp_path, "train", TRAIN)
    write_split(tmp_path, "test", {"cat": 1}, seed=1)
    imagefiles.scan_folder(tmp_path / "test", sorted(TRAIN))
    assert_documented(warning_of(capsys))
    (tmp_path / "train" / "cat" / "up").symlink_to(tmp_path / "train")
    imagefiles.scan_folder(tmp_path / "train")
    assert_documented(warning_of(capsys))
    write_split(tmp_path, "test", {"bee": 1}, seed=2)
    with pytest.raises(imagefiles.DatasetError) as info:
        imagefiles.scan_folder(tmp_path / "test", sorted(TRAIN))
    assert_documented(str(info.value))


def test_list_and_permission_messages_are_quoted(tmp_path, monkeypatch):
    write_png(tmp_path / "a.png", random_images(1, 8, 0)[0])
    (tmp_path / "test.txt").write_text("a.png 5\n")
    with pytest.raises(imagefiles.DatasetError) as info:
        imagefiles.read_list(tmp_path / "test.txt", tmp_path, ["0", "1"])
    assert_documented(str(info.value))
    (tmp_path / "c").mkdir()
    deny(monkeypatch, tmp_path / "c")
    with pytest.raises(imagefiles.DatasetError) as info:
        imagefiles.list_folder(tmp_path / "c")
    assert_documented(str(info.value))
    deny(monkeypatch, tmp_path / "a.png")
    with pytest.raises(imagefiles.BadImageError) as info:
        imagefiles.read_image(tmp_path / "a.png")
    assert_documented(str(info.value))


def test_linear_eval_messages_are_quoted(tmp_path, capsys):
    module = torch.nn.Linear(2, 2)
    with torch.no_grad():
        module.weight[0, 0] = float("nan")
    with pytest.raises(checkpoint_io.CheckpointError) as info:
        checkpoints._refuse_non_finite(module, tmp_path / "last.pt")
    assert_documented(str(info.value))
    cache = tmp_path / "run" / "features" / "digits-test-plain-0123.pt"
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"PK\x03\x04 truncated")
    assert features._read_cache(cache) is None
    assert_documented(warning_of(capsys))
