"""Values that passed validation and then crashed or were taken silently: each is refused with a
message naming the key (exit 2 from the command line), or, for a null in ``loss.kwargs``, means
the default as it does in ``negatives.kwargs``."""

from __future__ import annotations

import pytest
from fakeckpt import make_checkpoint
from inproc import linear_eval, pretrain

from pretrain import build, config
from pretrain.config import ConfigError
from tests.test_troubleshooting_data import assert_documented

TINY = ["model.width=8", "train.max_steps=1", "train.progress_bar=false", "data.num_workers=0",
        "train.batch_size=32", "moco.queue_size=64"]  # fmt: skip


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("seed=-1", "config key 'seed' = -1 must lie in [0, 4294967295] (numpy's generators "
         "take 32-bit seeds)"),
        (f"seed={2**64}", f"config key 'seed' = {2**64} must lie in [0, 4294967295]"),
        ("data.affine_degrees=-10", "config key 'data.affine_degrees' = -10.0 must lie in "
         "[0, 180] (RandomAffine rotates by an angle in [-degrees, degrees])"),
        ("data.image_size=1", "config key 'data.image_size' = 1 must be >= 2 (a 1-pixel crop "
         "has nothing to resize)"),
        ("data.eval_resize=1", "config key 'data.eval_resize' = 1 must be >= 2 (a 1-pixel short "
         "side has nothing to resize)"),
        ("data.affine_translate=5", "config key 'data.affine_translate' = 5.0 must lie in "
         "[0, 1] (a fraction of the image: above 1 most views would hold no image pixel)"),
        ("data.affine_translate=-0.1", "config key 'data.affine_translate' = -0.1 must lie in "
         "[0, 1]"),
        ("train.keep_every=-1", "config key 'train.keep_every' = -1 must be >= 0 (0 = never)"),
        ("train.max_requeues=-1", "config key 'train.max_requeues' = -1 must be >= 0"),
    ],
)  # fmt: skip
def test_values_that_crashed_later_are_refused_naming_the_key(override, message):
    with pytest.raises(ConfigError) as info:
        config.load("digits_moco.yaml", [override])
    assert str(info.value).startswith(message), str(info.value)
    assert_documented(str(info.value))


def test_a_null_loss_kwarg_takes_the_default_as_a_strategy_kwarg_does():
    cfg = config.load("digits_debiased.yaml", ["loss.kwargs.tau_plus=null"])
    default = config.load("digits_debiased.yaml", ["loss.kwargs={}"])
    made, ref = build.loss_fn(cfg, 10), build.loss_fn(default, 10)
    assert made.tau_plus == ref.tau_plus and made.tau_plus is not None


def test_a_knn_k_above_the_bank_is_named_in_pretraining_and_refused_in_linear_eval(tmp_path):
    """Pretraining warns (the shipped one-class config's 142 images are below the default 200:
    the monitor votes over all of them); linear_eval's explicit --k is refused, and the k it
    records is the one used."""
    done = pretrain("--cfg", "digits_moco.yaml", f"out_dir={tmp_path / 'r'}", *TINY,
                    "data.subset=4", "train.batch_size=8", "moco.queue_size=32",
                    "eval.knn_every=1", "eval.knn_k=100000")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    warned = [x for x in done.stderr.splitlines() if "eval.knn_k" in x]
    assert warned == [
        "warning: eval.knn_k = 100000 exceeds the kNN bank (40 training images after "
        "data.subset/data.in_classes): the monitor votes over all 40; give eval.knn_k=40 or less "
        "to say so"
    ], done.stderr[-2000:]
    assert_documented(warned[0].removeprefix("warning: "))
    ckpt = make_checkpoint(tmp_path / "run")
    done = linear_eval("--ckpt", str(ckpt), "--k", "100000", "--epochs", "1")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--k 100000 exceeds the 1437 training images (the kNN bank); give --k 1437 or less" in (
        done.stderr
    ), done.stderr[-2000:]
    assert_documented(done.stderr.strip().splitlines()[-1].removeprefix("error: "))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["moco.queue_size=1000000000"], "config key 'moco.queue_size' = 1000000000 x model.dim = "
         "128 floats exceed 16 GiB (2**32 float32 values) for the queue; a queue is at most the "
         "training set (checked once the data is read)"),
        (["model.width=100000"], "config key 'model.width' = 100000 must be <= 1024 "
         "(resnet_small's first stage; its last has 8x)"),
        (["kappa.hidden=1000000000"], "config key 'kappa.hidden' = 1000000000 must "
         "lie in [0, 65536] (0 = no head; vMF-kappa uses 512)"),
        (["data.image_size=100000"], "config key 'data.image_size' = 100000 must be <= 4096 (a "
         "training view of image_size**2 pixels)"),
        (["data.eval_resize=100000"], "config key 'data.eval_resize' = 100000 must be <= 4096 "
         "(the eval images' short side)"),
        (["model.dim=10000000"], "config key 'model.dim' = 10000000 must be <= 65536 (the "
         "projection head's output)"),
        (["data.support_views=1000000"], "config key 'data.support_views' = 1000000 must be <= 64 "
         "(extra views per image; FNC's official count is 8)"),
        (["negatives.name=mochi", "negatives.kwargs.num_mix=1000000000"], "negatives: num_mix "
         "must be at most 16384 (synthetic points per query and step; the paper uses 1024 or "
         "fewer), got 1000000000"),
        (["negatives.name=mioc", "negatives.kwargs.num_synthetic=1000000000"], "negatives: "
         "num_synthetic must be at most 16384 (synthetic points per query and step; the paper "
         "uses 1024 or fewer), got 1000000000"),
    ],
)  # fmt: skip
def test_sizes_that_would_take_memory_before_failing_are_refused_first(
    overrides, message, tmp_path, monkeypatch
):
    """Each is refused before its memory is taken: the config's bounds (before anything is
    built), or the strategy's constructor check (before its buffers are allocated)."""
    with pytest.raises(ConfigError) as info:
        cfg = config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *overrides])
        build.strategy(cfg)
    assert str(info.value) == message
    assert_documented(message)


def test_the_queue_is_checked_against_the_training_set_before_it_is_allocated(monkeypatch):
    cfg = config.load("digits_moco.yaml", ["moco.queue_size=100000000", "model.dim=8"])
    monkeypatch.setattr(build, "LabeledQueue", lambda *a: pytest.fail("allocated first"))
    with pytest.raises(ConfigError, match=r"moco.queue_size \(100000000\) exceeds the training"):
        build.queue(cfg, 1437)


def test_a_mioc_gamma_whose_kernel_overflows_is_refused_naming_the_key():
    """gamma=1e300 made the host solver spin on NaN (no step in 60 s, SIGTERM
    ignored); it is exit 2 before anything runs."""
    with pytest.raises(ConfigError) as info:
        cfg = config.load("digits_mioc.yaml", ["negatives.kwargs.gamma=1e300"])
        build.strategy(cfg)
    message = str(info.value)
    assert message == (
        "negatives: gamma must be at most 1e+09 for MiOC, got 1e+300: its points are unit vectors, "
        "and above that the rounding of their squared distance (about 1e-16) times gamma makes the "
        "RBF kernel wrong, then overflow, and the solver spins on NaN (the paper uses 0.01)"
    )
    assert_documented(message)
    build.strategy(config.load("digits_mioc.yaml", ["negatives.kwargs.gamma=1e9"]))  # the edge
