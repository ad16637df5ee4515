"""Values that used to run with exit 0 (meaningless) or end in a traceback are refused at setup with
a message quoted word for word on docs/troubleshooting.md: config
ranges, MiOC's solver settings, a missing optional backend, and a run lock that is not a file."""

from __future__ import annotations

import sys

import pytest

from pretrain import build, config
from pretrain.config import ConfigError
from pretrain.runtime import runlock
from tests.helpers import inproc
from tests.helpers.fakeckpt import make_checkpoint
from tests.helpers.inproc import linear_eval, pretrain
from tests.helpers.troubleshooting_quotes import assert_documented

BAD_CONFIG = [
    "train.weight_decay=-1", "data.hflip_prob=2", "data.grayscale_prob=-1", "data.jitter_prob=1.5",
    "data.blur_prob=-0.5",
    "data.jitter_strength=-3", "data.jitter_strength=2.5",
    "eval.knn_temperature=0", "eval.knn_temperature=-0.1",
    "train.lr_milestones=[160,120]", "train.lr_milestones=[-5,120]", "train.lr_milestones=[0]",
    "train.lr_milestones=[120,120]", "train.lr_milestones=[0, 20]",  # F03: a 0 before a valid one
    "train.lr_base_batch=0", "train.lr_base_batch=-64",
    "train.sgd_momentum=-1", "train.sgd_momentum=1",
]  # fmt: skip


@pytest.mark.parametrize("override", BAD_CONFIG)
def test_meaningless_config_values_are_refused(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError) as info:
        config.load("digits_moco.yaml", [override])
    message = str(info.value)
    assert message.startswith(f"config key {key!r} = "), message
    assert_documented(message)


def test_non_finite_values_of_typed_keys_stay_refused_by_the_type_check():
    for override in ("train.weight_decay=.nan", "eval.knn_temperature=.inf"):
        with pytest.raises(ConfigError, match="must be a finite number"):
            config.load("digits_moco.yaml", [override])


@pytest.mark.parametrize(
    "override",
    ["train.weight_decay=0", "data.hflip_prob=0", "data.hflip_prob=1", "data.jitter_strength=0",
     "train.lr_milestones=[]", "train.lr_milestones=[1,2]", "train.lr_milestones=[1, 20]",
     "train.sgd_momentum=0"],
)  # fmt: skip
def test_the_edges_of_the_ranges_are_accepted(override):
    config.load("digits_moco.yaml", [override])


def test_a_refused_config_value_exits_2_before_any_work(tmp_path):
    out = inproc.pretrain(
        "--cfg", "digits_moco.yaml", f"out_dir={tmp_path}", "train.lr_base_batch=0"
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "config key 'train.lr_base_batch' = 0 must be positive" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "checkpoints").exists()


BAD_MIOC = [  # non-finite numbers are refused by the kwargs' type check, when the config loads
    ("nu=1", "negatives: nu must lie in (0, 1) for MiOC"),
    ("gamma=.inf", "config key 'negatives.kwargs.gamma' in the config must be a finite number"),
    ("tol=.inf", "config key 'negatives.kwargs.tol' in the config must be a finite number"),
    ("warmup_epochs=.nan",
     "config key 'negatives.kwargs.warmup_epochs' in the config must be a finite number"),
    ("warmup_epochs=.inf",
     "config key 'negatives.kwargs.warmup_epochs' in the config must be a finite number"),
]  # fmt: skip


@pytest.mark.parametrize(("kwarg", "why"), BAD_MIOC, ids=[k for k, _ in BAD_MIOC])
def test_mioc_values_the_solver_would_refuse_are_refused_at_setup(kwarg, why):
    with pytest.raises(ConfigError) as info:
        cfg = config.load("digits_mioc.yaml", [f"negatives.kwargs.{kwarg}"])
        build.strategy(cfg)  # at setup, before the first step (the warm-up no longer hides it)
    assert str(info.value).startswith(why), info.value
    assert_documented(str(info.value))


def test_mioc_nu_just_below_one_is_still_accepted():
    build.strategy(config.load("digits_mioc.yaml", ["negatives.kwargs.nu=0.999"]))


def test_thundersvm_backend_without_the_package_is_refused_at_setup(monkeypatch):
    monkeypatch.setitem(sys.modules, "thundersvm", None)  # not installed (an import fails)
    cfg = config.load("digits_mioc.yaml", ["negatives.kwargs.backend=thundersvm"])
    with pytest.raises(ConfigError) as info:
        build.strategy(cfg)
    assert "pip install thundersvm-cpu" in str(info.value)
    assert_documented(str(info.value))


def test_a_lock_that_is_a_directory_or_a_dangling_link_is_a_clear_error(tmp_path):
    (tmp_path / "a" / ".lock").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / ".lock").symlink_to(tmp_path / "nowhere" / "lock")
    for run, says in (("a", "is a directory, not a file"), ("b", "is a symbolic link to")):
        lock = runlock.RunLock(tmp_path / run)
        with pytest.raises(runlock.RunInUseError) as info:
            lock.acquire()
        assert says in str(info.value) and not lock.held
        assert_documented(str(info.value))
    assert (tmp_path / "a" / ".lock").is_dir() and not (tmp_path / "nowhere").exists()


def test_a_bad_lock_exits_2_with_its_message(tmp_path):
    (tmp_path / ".lock").mkdir()
    out = inproc.pretrain("--cfg", "digits_moco.yaml", f"out_dir={tmp_path}")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "is a directory, not a file" in out.stderr and "Traceback" not in out.stderr


# --- values that passed validation, then crashed or were taken silently --------------------


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
