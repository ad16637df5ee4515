"""``--select-on val``: the stratified held-out split, and the kNN (k, T) choice against a numpy
re-derivation of the weighted vote over the whole grid."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from linear_eval.__main__ import main
from linear_eval.classify import select
from tests.helpers.fakeckpt import make_checkpoint


def test_stratified_split_holds_out_a_share_of_every_class():
    y = torch.tensor([0] * 25 + [1] * 11 + [2] * 4)
    fit, val = select.stratified_split(y, 0.1, seed=3)
    assert set(fit.tolist()).isdisjoint(val.tolist())
    assert sorted(fit.tolist() + val.tolist()) == list(range(40))
    for c, n in ((0, 25), (1, 11), (2, 4)):
        assert int((y[val] == c).sum()) == max(1, math.ceil(0.1 * n))
    again = select.stratified_split(y, 0.1, seed=3)[1]
    assert torch.equal(val, again) and not torch.equal(val, select.stratified_split(y, 0.1, 4)[1])
    with pytest.raises(ValueError, match="in \\(0, 1\\)"):
        select.stratified_split(y, 1.0)


def _np_knn_acc(bank, by, q, qy, k, t, c):
    b = bank / np.linalg.norm(bank, axis=1, keepdims=True)
    qq = q / np.linalg.norm(q, axis=1, keepdims=True)
    sim = qq @ b.T
    idx = np.argsort(-sim, axis=1, kind="stable")[:, :k]
    votes = np.zeros((len(q), c))
    for i in range(len(q)):
        for j in idx[i]:
            votes[i, by[j]] += np.exp(sim[i, j] / t)
    return 100.0 * (votes.argmax(1) == qy).mean()


def test_knn_selection_matches_a_numpy_grid_search():
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(3, 8, generator=g)
    y = torch.arange(3).repeat_interleave(40)
    x = centres[y] + 0.9 * torch.randn(120, 8, generator=g)
    ty = torch.arange(3).repeat_interleave(10)
    tx = centres[ty] + 0.9 * torch.randn(30, 8, generator=g)
    grid = ((1, 0.1), (5, 0.05), (20, 0.2))
    rec = select.knn(x, y, tx, ty, 3, grid=grid, fraction=0.25, seed=1)
    fit, val = select.stratified_split(y, 0.25, seed=1)
    xn, yn = x.double().numpy(), y.numpy()
    accs = [_np_knn_acc(xn[fit], yn[fit], xn[val], yn[val], k, t, 3) for k, t in grid]
    best = grid[int(np.argmax(accs))]
    sel = rec["selection"]
    assert sel["on"] == "val" and sel["val_size"] == 30 and sel["fit_size"] == 90
    assert list(sel["val_top1"].values()) == pytest.approx(accs)
    assert (sel["selected"]["k"], sel["selected"]["temperature"]) == best
    want = _np_knn_acc(xn, yn, tx.double().numpy(), ty.numpy(), *best, 3)
    assert rec["top1"] == pytest.approx(want)


def test_cli_select_on_val_writes_what_was_selected(tmp_path, capsys):
    ckpt = make_checkpoint(tmp_path / "run")
    assert main(["knn", "--ckpt", str(ckpt), "--select-on", "val", "--no-cache"]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rec["selection"]["on"] == "val" and "stratified 10%" in rec["selection"]["val"]
    assert set(rec["selection"]["selected"]) == {"k", "temperature"}
    saved = json.loads((tmp_path / "run" / "eval" / "knn_select.json").read_text())
    assert saved["top1"] == rec["top1"]
