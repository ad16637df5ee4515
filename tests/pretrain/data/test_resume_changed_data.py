"""``data.resume_on_changed_data=true``: the resume says what changed, with
both sizes, and the epoch it finishes reports the mean loss over the steps that ran, not their
sum over the new epoch's step count."""

from __future__ import annotations

from tests.helpers.folders import RUN, folder
from tests.helpers.runs import lines, pretrain
from tests.helpers.troubleshooting_quotes import assert_documented

SMALL = ["train.batch_size=16", "moco.queue_size=32"]


def test_a_resume_on_a_shrunk_set_warns_with_both_sizes_and_averages_the_steps_run(tmp_path):
    root, out = tmp_path / "d", tmp_path / "run"
    folder(root, 96)  # batch 16: 6 steps per epoch, stopped after 3
    done = pretrain(out, f"data.root={root}", "train.max_steps=3", *RUN, *SMALL)
    assert done.returncode == 0, done.stderr[-2000:]
    for i in range(40, 96):  # 96 -> 40 images: 2 steps per epoch
        (root / "train" / f"c{i % 2}" / f"{i:03d}.png").unlink()
    done = pretrain(out, f"data.root={root}", "data.resume_on_changed_data=true", *RUN, *SMALL)
    assert done.returncode == 0, done.stderr[-2000:]
    warned = [x for x in done.stderr.splitlines() if "training set changed" in x]
    assert warned == [
        f"warning: {out}: the training set changed since the checkpoint (96 images then, 40 now; "
        "another size); resuming anyway (data.resume_on_changed_data=true) at epoch 1 step 3, "
        "where an epoch is now 2 steps: the epoch in progress ends with the steps it ran, and "
        "its loss is their mean"
    ], done.stderr[-2000:]
    assert_documented(warned[0].removeprefix("warning: "))
    steps = [r["loss"] for r in lines(out, "step") if r["epoch"] < 1]
    [epoch] = lines(out, "epoch")
    assert len(steps) == 3
    assert abs(epoch["loss"] - sum(steps) / 3) < 1e-5, (epoch["loss"], steps)
