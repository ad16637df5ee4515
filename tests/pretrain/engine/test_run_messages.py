"""What a run says at its end: one closing line with the final metrics and
the checkpoint's path; the command of a finished run, run again, says the run is complete and
where its checkpoint and metrics are, and rewrites nothing (it said "resuming at epoch 2")."""

from __future__ import annotations

from tests.helpers.runs import lines, pretrain


def test_a_run_closes_with_its_metrics_and_a_rerun_says_it_is_complete(tmp_path):
    out = tmp_path / "run"
    done = pretrain(out, "train.epochs=1")
    assert done.returncode == 0, done.stderr[-2000:]
    (record,) = lines(out, "epoch")
    ckpt, metrics = out / "checkpoints" / "last.pt", out / "metrics.jsonl"
    last = done.stdout.strip().splitlines()[-1]
    assert last == (
        f"run complete (1 epoch): epoch 1: loss={record['loss']:.4g} "
        f"knn_top1={record['knn_top1']:.4g}; checkpoint {ckpt}; metrics {metrics}"
    )
    files = (out / "config.yaml", out / "derived.yaml", ckpt)  # metrics.jsonl: its bytes
    kept = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files}
    logged = metrics.read_bytes()
    again = pretrain(out, "train.epochs=1")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming at" not in again.stdout
    assert again.stdout.strip().splitlines()[-1] == (
        f"{out} is complete (1 of 1 epochs trained); nothing to do. epoch 1: "
        f"loss={record['loss']:.4g} knn_top1={record['knn_top1']:.4g}; checkpoint {ckpt}; "
        f"metrics {metrics}. Its schedule has ended (train.epochs cannot be raised on resume: "
        f"a longer run is a new out_dir), or evaluate it: python -m linear_eval --ckpt {ckpt}"
    )
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files} == kept
    assert metrics.read_bytes() == logged
