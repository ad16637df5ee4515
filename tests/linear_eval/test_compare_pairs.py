"""``linear_eval compare`` pairs test images, so its two checkpoints must be evaluated on one
test set: two image folders whose test splits have equal sizes but other
images are refused with exit 2 before any feature is extracted, and unequal sizes are named
without the statistics' internal names."""

from __future__ import annotations

import numpy as np
import pytest

from linear_eval.records import stats
from pretrain.testing.fakedata import random_images, write_png
from tests.helpers.fakeckpt import make_checkpoint
from tests.helpers.inproc import linear_eval
from tests.helpers.troubleshooting_quotes import assert_documented


def image_folder(root, tag: str, flat: bool = False) -> None:
    """Images named after ``tag``: random ones, or (``flat``) uniform grey ones."""
    for split, n in (("train", 8), ("test", 4)):
        for i, img in enumerate(random_images(n, 16, seed=len(tag))):
            image = np.full_like(img, 128) if flat else img
            write_png(root / split / f"c{i % 2}" / f"{tag}{i}.png", image)


@pytest.mark.parametrize("flat", [False, True], ids=["other names", "same names, other images"])
def test_compare_refuses_checkpoints_of_two_test_sets_of_one_size(tmp_path, flat):
    """Two folders of 4 test images: other file names, or the same names and labels with other
    images (the digest covers the files' sizes: a flat PNG is smaller than a random one)."""
    ckpts = []
    for tag in ("a", "b"):
        image_folder(tmp_path / f"d{tag}", "a" if flat else tag, flat=flat and tag == "b")
        ckpts.append(make_checkpoint(tmp_path / f"run{tag}", "data.name=imagefolder",
                                     f"data.root={tmp_path / f'd{tag}'}", "data.image_size=16",
                                     "data.eval_resize=16", "eval.knn_k=2"))  # fmt: skip
    done = linear_eval("compare", "--ckpt", str(ckpts[0]), "--ckpt", str(ckpts[1]))
    assert done.returncode == 2, done.stderr[-2000:]
    message = done.stderr.strip().splitlines()[-1].removeprefix("error: ")
    assert message == (
        f"compare needs one test set: {ckpts[0]} is evaluated on 4 test images, {ckpts[1]} on 4 "
        "(their files, labels or pixels differ); compare pairs each test image's results, so "
        "evaluate both on the same data (--data-root)"
    )
    assert_documented(message)
    assert not (tmp_path / "runa" / "features").exists()  # refused before any extraction


def test_a_paired_difference_of_unequal_sizes_names_no_internal_variable():
    with pytest.raises(ValueError) as info:
        stats.paired_difference_ci(np.ones(3, "int8"), np.ones(4, "int8"))
    assert str(info.value) == (
        "the two results cover different test sets (3 and 4 images); a paired difference pairs "
        "each test image's results, so both must score the same test set"
    )
