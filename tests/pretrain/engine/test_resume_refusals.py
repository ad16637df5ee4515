"""A resume that would change what the run trains is refused (exit 2) before anything is
written, naming what changed and what to do: a larger ``train.epochs`` under a schedule that
decays over it (cosine, or a loss that takes ``train.epochs``), and a plugin file edited since
the checkpoint."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from negatives import ExtraNegatives, NegativeStrategy
from negmine_core.step import Step
from pretrain import config
from pretrain.config import ConfigError
from pretrain.engine import checkpoint as resume
from pretrain.engine import loop
from pretrain.engine.schedules import learning_rate
from pretrain.runtime import checkpoint_io as checkpoint
from pretrain.testing import steps
from tests.helpers import inproc
from tests.helpers.inproc import error_line
from tests.helpers.runs import SUBSET_RUN
from tests.helpers.troubleshooting_quotes import assert_documented

SMALL = ["model.width=8", "train.batch_size=64", "moco.queue_size=128", "eval.knn_every=0",
         "train.progress_bar=false", "data.num_workers=0", "train.max_steps=2"]  # fmt: skip


def pretrain(out: Path, *extra: str, cfg: str = "digits_moco.yaml"):
    return inproc.pretrain("--cfg", cfg, f"out_dir={out}", *SMALL, *extra)


def test_a_longer_run_under_the_cosine_schedule_is_refused_with_both_lengths(tmp_path):
    out = tmp_path / "run"
    per_step = "train.lr_per_epoch=false"  # the cosine has decayed from the second step on
    assert pretrain(out, per_step, "train.epochs=3").returncode == 0  # stopped at step 2
    kept = (out / "config.yaml").read_bytes()
    bad = pretrain(out, per_step, "train.epochs=5")
    assert bad.returncode == 2, bad.stderr[-2000:]
    message = error_line(bad.stderr)
    assert message == (
        f"train.epochs=5 differs from the 3 epochs {out} was started with, and its lr schedule "
        "(train.lr_schedule=cosine) decays to 0 over train.epochs: the steps left would follow "
        "another schedule than the steps done, and the folder would claim a 5-epoch run. Resume "
        "with train.epochs=3, or train 5 epochs in a new out_dir (train.lr_schedule=step does "
        "not depend on train.epochs)"
    )
    assert_documented(message)
    assert (out / "config.yaml").read_bytes() == kept
    assert pretrain(out, per_step, "train.epochs=3").returncode == 0  # the same length resumes


def test_moco_s_per_epoch_cosine_may_be_extended_within_its_first_epoch(tmp_path):
    """MoCo's lr is set once per epoch: all of epoch 0 reads the cosine's start, the same for
    any length, so a run stopped there may be given another length."""
    out = tmp_path / "run"
    assert pretrain(out, "train.epochs=3").returncode == 0  # stopped at step 2 of epoch 0
    longer = pretrain(out, "train.epochs=5")
    assert longer.returncode == 0, longer.stderr[-2000:]


@pytest.mark.parametrize(
    ("per_epoch", "warmup", "first"),
    [(p, w, 0) for p in (True, False) for w in (0.0, 1.0, 1.5)] + [(True, 0.0, 1), (False, 0.0, 1)],
)  # lr_first_epoch=1 is refused with a warm-up
def test_the_cosine_has_decayed_exactly_when_a_step_done_reads_another_lr(per_epoch, warmup, first):
    """Against the schedule itself: a run of 4 epochs stopped after n steps (5 per epoch) has
    decayed iff some step done had another lr in a 7-epoch run (loop.set_lr's epoch)."""
    cfg = config.load("digits_moco.yaml", ["train.epochs=4", f"train.warmup_epochs={warmup}",
                                           f"train.lr_per_epoch={str(per_epoch).lower()}",
                                           f"train.lr_first_epoch={first}"])  # fmt: skip
    t, steps = cfg.train, 5

    def lr(epoch: float, epochs: int) -> float:
        return learning_rate(epoch + first, 1.0, epochs, warmup, "cosine", (), per_epoch)

    for n in range(0, 4 * steps):
        done = [i / steps for i in range(n)]
        differs = any(lr(e, t.epochs) != lr(e, 7) for e in done)
        assert resume.cosine_has_decayed(cfg, n // steps, n % steps, steps) == differs, n


def test_a_loss_that_takes_train_epochs_is_named_too(tmp_path):
    out = tmp_path / "run"
    step = ["train.lr_schedule=step", "train.epochs=3"]
    assert pretrain(out, *step, cfg="digits_hard.yaml").returncode == 0
    bad = pretrain(out, "train.lr_schedule=step", "train.epochs=4", cfg="digits_hard.yaml")
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert "and loss 'hard' takes train.epochs (its own schedule): " in error_line(bad.stderr)


def test_the_step_schedule_may_be_extended(tmp_path):
    """Its milestones are epochs, whatever train.epochs: a longer run goes on."""
    out = tmp_path / "run"
    step = ["train.lr_schedule=step", "train.lr_milestones=[2]"]
    assert pretrain(out, *step, "train.epochs=1").returncode == 0
    longer = pretrain(out, *step, "train.epochs=2")
    assert longer.returncode == 0, longer.stderr[-2000:]


class FileKeys(NegativeStrategy):
    """A plugin's strategy, defined in this file (its provenance: this file's sha256)."""

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives()


def test_a_plugin_file_edited_since_the_checkpoint_is_refused_naming_it_and_both_digests(tmp_path):
    """The checkpoint records the file's sha256 it ran; a resume that loads other code stops."""
    here = Path(__file__).resolve()
    digest = hashlib.sha256(here.read_bytes()).hexdigest()
    with steps.registered(FileKeys) as name:
        args = [f"out_dir={tmp_path}", *SMALL, "train.epochs=1", f"negatives.name={name}"]
        assert loop.main(config.load("digits_moco.yaml", args)) == 0  # stopped at step 2
        last = tmp_path / "checkpoints" / "last.pt"
        state = checkpoint.load(last)
        [record] = state["provenance"]["segments"][-1]["plugins"]
        assert record["file"] == str(here) and record["sha256"] == digest
        record["sha256"] = "0123456789ab" + "0" * 52  # the file as it was at the stop
        checkpoint.save(state, last)
        with pytest.raises(ConfigError) as info:
            loop.main(config.load("digits_moco.yaml", [*args, "train.max_steps=4"]))
    message = str(info.value)
    assert message == (
        f"{tmp_path}: the strategy plugin {name!r} in {here} changed since the checkpoint "
        f"(sha256:0123456789ab then, sha256:{digest[:12]} now): the steps left would run other "
        "code than the steps done. Restore the file as it was to resume, or choose a new out_dir"
    )
    assert_documented(message)
    assert checkpoint.load(last)["global_step"] == 2  # nothing trained


def test_skip_bad_images_may_change_on_resume(tmp_path):
    """E06: without ``data.skip_bad_images`` among the resumable keys, the documented resume
    that turns it on (after an unreadable image stopped the run) exits 2."""
    from tests.helpers.inproc import pretrain

    out = tmp_path / "run"
    args = ["--cfg", "digits_moco.yaml", f"out_dir={out}", *SUBSET_RUN, "train.epochs=1"]
    assert pretrain(*args, "train.max_steps=2").returncode == 0
    done = pretrain(*args, "data.skip_bad_images=true")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resuming at epoch 1 step 2" in done.stdout
