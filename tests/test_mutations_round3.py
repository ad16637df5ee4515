"""Tests for mutations the round-3 audit found surviving (engine, config, plugins, data, records):
each fails when its mutation is applied (see the test's docstring for which)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pretrain import config
from pretrain.config import ConfigError


@pytest.mark.parametrize(
    ("override", "key"),
    [("data.crop_scale=[0.2, 1.5]", "data.crop_scale"),  # C01: the upper bound of 1
     ("data.subset=1.5", "data.subset")],  # C02: a fraction must lie below 1
)  # fmt: skip
def test_crop_scale_above_1_and_a_fractional_subset_above_1_are_refused(override, key):
    """C01 (``crop_scale[1] <= 1`` dropped) and C02 (a fractional ``data.subset`` above 1
    accepted) make these load."""
    with pytest.raises(ConfigError, match=f"config key '{key}'"):
        config.load("digits_moco.yaml", [override])
    config.load("digits_moco.yaml", [override.replace("1.5", "1")])  # the edge is valid


def test_the_kappa_heads_weights_are_typed_like_the_losses_own():
    """C04: the kappa head's weights (the ``kappa`` section) are typed: YAML's ``1e-2`` (a string
    to YAML 1.1) becomes a float, as a loss's own setting does."""
    cfg = config.load("digits_kappa.yaml", ["kappa.lambda_align=1e-2"])
    value = cfg.kappa.lambda_align
    assert value == 0.01 and isinstance(value, float)


SMALL = ["model.width=8", "data.subset=4", "train.batch_size=8", "moco.queue_size=32",
         "eval.knn_k=5", "train.progress_bar=false", "data.num_workers=0"]  # fmt: skip


def test_the_last_epoch_is_saved_and_evaluated_when_the_intervals_do_not_divide_it(tmp_path):
    """E09 (the last epoch saved only when ``train.ckpt_every`` divides it: ``last.pt`` held
    epoch 2 of 3) and E10 (evaluated only when ``eval.knn_every`` divides it)."""
    from inproc import pretrain
    from test_engine import lines

    from pretrain.runtime import checkpoint_io

    out = tmp_path / "run"
    done = pretrain("--cfg", "digits_moco.yaml", f"out_dir={out}", *SMALL, "train.epochs=3",
                    "train.ckpt_every=2", "eval.knn_every=2")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert checkpoint_io.load(out / "checkpoints" / "last.pt")["epoch"] == 3
    assert ["knn_top1" in r for r in lines(out, "epoch")] == [False, True, True]


def test_skip_bad_images_may_change_on_resume(tmp_path):
    """E06: without ``data.skip_bad_images`` among the resumable keys, the documented resume
    that turns it on (after an unreadable image stopped the run) exits 2."""
    from inproc import pretrain

    out = tmp_path / "run"
    args = ["--cfg", "digits_moco.yaml", f"out_dir={out}", *SMALL, "train.epochs=1"]
    assert pretrain(*args, "train.max_steps=2").returncode == 0
    done = pretrain(*args, "data.skip_bad_images=true")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resuming at epoch 1 step 2" in done.stdout


TWO_OF_ONE_NAME = """
from negatives import ExtraNegatives, NegativeStrategy, Step, register


@register("twice_in_one_file")
class Mine(NegativeStrategy):
    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives()


@register("twice_in_one_file")
class Mine(NegativeStrategy):  # noqa: F811
    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives(shared=s.emb.k.detach())
"""


def test_two_classes_of_one_qualname_in_one_file_are_a_duplicate(tmp_path, monkeypatch):
    """N02: ``same_class`` compared ``inspect.getsourcelines``, which (Python < 3.13) finds the
    first class of that name for both, so the second registered silently."""
    from negatives.base import strategies
    from negmine_core.registry import PluginError, import_plugin

    strategies.names()  # scanned, then the registry put back after the test
    monkeypatch.setattr(strategies, "_classes", dict(strategies._classes))

    (tmp_path / "two.py").write_text(TWO_OF_ONE_NAME)
    with pytest.raises(PluginError, match="negative strategy 'twice_in_one_file' is already "):
        import_plugin(str(tmp_path / "two.py"))


def test_lr_by_epoch_holds_epoch_0_when_the_lr_never_changes():
    """V08: without ``e == 0`` the first epoch is compared with the last one (``lr_log[-1]``),
    and a constant lr records no epoch at all."""
    from linear_eval.classify import probe

    assert probe.lr_changes([0.1, 0.1, 0.1]) == {"0": 0.1}
    assert probe.lr_changes([0.1, 0.01, 0.1]) == {"0": 0.1, "1": 0.01, "2": 0.1}


def test_a_group_of_x_seed0_and_x_seed1_is_named_x():
    """V07: the table names a group by its run folders without the seed suffix; ``_seedN`` as
    well as ``_sN`` (a regex that strips only ``_sN`` names it "x_seed0, x_seed1")."""
    from types import SimpleNamespace

    from linear_eval.cli.table import label

    runs = [SimpleNamespace(path=Path(f"/r/x_seed{i}")) for i in (0, 1)]
    assert label(runs) == "x"
    assert label([SimpleNamespace(path=Path("/r/x_s3")), *runs]) == "x"


def test_a_run_of_uncommitted_code_is_marked_dirty_in_the_results_table(tmp_path, monkeypatch):
    """V03: the results table's commit cell says ``+dirty`` for runs of uncommitted code."""
    import json
    import shutil

    from tests.test_results_page import fake_run, gen_results, rows

    runs, page, readme = tmp_path / "runs", tmp_path / "results.md", tmp_path / "README.md"
    shutil.copy(gen_results.README, readme)
    for name, value in (("RUNS", runs), ("PAGE", page), ("README", readme)):
        monkeypatch.setattr(gen_results, name, value)
    fake_run(runs / "digits_moco_s0", 0, 90.0, 100.0)
    prov_file = runs / "digits_moco_s0" / "provenance.json"
    prov_file.write_text(json.dumps({**json.loads(prov_file.read_text()), "dirty": True}))
    assert gen_results.main([]) == 0
    (row,) = [r for r in rows(page.read_text()) if r[0] == "`digits_moco.yaml`"]
    assert row[10] == "abcdef0+dirty"


def test_a_sweep_whose_third_task_names_the_firsts_out_dir_is_refused(tmp_path, monkeypatch):
    """V09: every earlier task is compared, not only the one before."""
    from slurm.__main__ import task_configs
    from slurm.submit import SlurmError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SlurmError, match="sweep tasks 0 and 2 would share the run directory"):
        task_configs("digits_moco.yaml", [], [["out_dir=a"], ["out_dir=b"], ["out_dir=a"]])


def test_relabelling_an_image_list_changes_the_identity_and_the_cache_key(tmp_path):
    """D01 and D03: the label is part of the training set's identity (a resume on a relabelled
    list is refused) and of the decode cache's key (the cache is not served for other labels)."""
    from test_train_set_identity import folder

    from pretrain.data import datasets, identity, resident

    folder(tmp_path, 8)
    files = sorted((tmp_path / "train").rglob("*.png"))
    lines = [f"{p.relative_to(tmp_path)} {int(p.parent.name[1])}" for p in files]
    relabelled = [*lines[:-1], lines[-1][:-1] + str(1 - int(lines[-1][-1]))]
    got = {}
    for name, text in (("a", lines), ("b", relabelled)):
        (tmp_path / f"{name}.txt").write_text("\n".join(text) + "\n")
        ds = datasets.build("imagefolder", str(tmp_path), f"{name}.txt")
        got[name] = (identity.train_set_identity(ds, tmp_path)["sha256"],
                     resident.cache_key(ds.samples))  # fmt: skip
    assert got["a"][0] != got["b"][0], "the identity ignores the labels"
    assert got["a"][1] != got["b"][1], "the cache key ignores the labels"


def test_the_run_eta_counts_the_steps_to_max_steps(tmp_path, monkeypatch):
    """E11: the run's ETA is over the steps until ``train.max_steps`` when that comes first (an
    ETA over the whole schedule ignored it)."""
    from inproc import pretrain

    from pretrain.runtime.progress import Progress

    seen = []
    monkeypatch.setattr(Progress, "report", lambda self, record, *, step_in_epoch, steps_left:
                        seen.append(steps_left))  # fmt: skip
    done = pretrain("--cfg", "digits_moco.yaml", f"out_dir={tmp_path}", *SMALL, "train.epochs=5",
                    "train.max_steps=3", "train.log_every=1", "eval.knn_every=0")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert seen == [2, 1, 0]
