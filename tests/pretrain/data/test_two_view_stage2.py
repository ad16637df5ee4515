"""Stage 2 of the augmentation as the training step runs it (``pretrain.engine.step``'s
``photometric``): both views in one batched call, each image with its own parameter row, in few
aten ops (issue 60)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from negmine_core.contract.op_counter import OpCounter
from negmine_core.step import Batch
from pretrain import config
from pretrain.data import augment_params as ap
from pretrain.data import jitter, pipeline, views
from pretrain.engine.step import photometric

N, S = 16, 32  # a CIFAR batch of 16 samples, two views each
STAGE2_OPS = 70  # 65 since stage 2 runs as colour matrices (221 before, issue 60)


class Squares(torch.utils.data.Dataset):
    """S x S uint8 images: stage 1 defers their crop to stage 2, as CIFAR's."""

    def __init__(self, n: int = N, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.data = torch.randint(0, 256, (n, 3, S, S), dtype=torch.uint8, generator=g)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.data[i], i % 10


def cifar_batch(seed: int = 3) -> tuple[Batch, SimpleNamespace]:
    """A loader batch of the cifar10_moco recipe's views (whole images and their rows) and a
    run holding that recipe's stage 2."""
    d = config.load("cifar10_moco.yaml").data
    spec = pipeline.view_spec(d)
    assert spec.image_size == S
    ds = views.CropViews(Squares(), spec, seed=seed)
    items = [ds[(0, i)] for i in range(N)]
    x1, x2 = (torch.stack([it[v] for it in items]) for v in (0, 1))
    y = torch.tensor([it[2] for it in items])
    rows = torch.stack([it[4] for it in items])  # (N, 2, NUM_COLUMNS)
    run = SimpleNamespace(data=SimpleNamespace(augment=pipeline.photometric(d)))
    return Batch.make(x1, x2, y, (rows,)), run


def test_stage2_of_a_cifar_step_takes_few_ops():
    """The step's stage 2 on a CIFAR batch (cifar10_moco: crop, flip, jitter, grayscale): each
    op is batched over both views whatever the op order, so the count does not grow with the
    batch; it was 223 with the per-op where/eq chains (issue 60)."""
    batch, run = cifar_batch()
    photometric(run, batch)  # warm: the crop's per-size constants are built once
    with OpCounter() as ops:
        out = photometric(run, batch)
    assert ops.count <= STAGE2_OPS, ops.top(20)
    assert out.x1.shape == out.x2.shape == (N, 3, S, S)
    assert out.x1.is_contiguous(memory_format=torch.channels_last)  # the encoders' layout


def test_two_views_in_one_call_equal_two_separate_calls():
    """One call on the 2N images equals a call per view with the same rows, bit for bit: every
    op is per image."""
    batch, run = cifar_batch()
    stage2 = run.data.augment
    out = photometric(run, batch)
    assert torch.equal(out.x1, stage2(batch.x1, batch.params[:, 0]))
    assert torch.equal(out.x2, stage2(batch.x2, batch.params[:, 1]))


def test_the_two_views_of_an_image_take_their_own_draws():
    """Each view's row is drawn on its own (view 0's, then view 1's, from the sample's
    generator) and the step applies each row to its own view: the jitter factors of the two
    views of a sample differ, and a row pair that differs only in the flip gives mirror-image
    views."""
    batch, run = cifar_batch()
    rows = batch.params
    factors = slice(ap.BRIGHTNESS, ap.HUE + 1)  # continuous draws: equal only if shared
    assert (rows[:, 0, factors] != rows[:, 1, factors]).all()
    rng = ap.sample_rng(3, 0, 5)  # sample 5's generator: view 0's draws, then view 1's
    spec = pipeline.view_spec(config.load("cifar10_moco.yaml").data)
    drawn = torch.tensor([views.deferred_row(spec, rng) for _ in range(2)], dtype=torch.float32)
    assert torch.equal(rows[5], drawn)
    same = rows[:, 0].clone()
    same[:, ap.JITTER] = same[:, ap.GRAY] = 0.0  # photometric identity but the flip
    twin = torch.stack([same, same], dim=1)
    twin[:, 1, ap.FLIP] = 1.0 - twin[:, 0, ap.FLIP]
    out = photometric(run, batch.replace(x2=batch.x1, params=twin))
    assert torch.equal(out.x1, out.x2.flip(-1))


def test_the_six_stages_replay_every_op_order():
    """The stage table: reading an order's blends at stages 0..2, the hue, then stages 3..5
    gives the order back, for each of the 24; each stage's matrices are the identity where the
    jitter is not applied."""
    table, ident = jitter.stage_table(1.0)
    for row, order in enumerate(ap.ORDERS.tolist()):
        ops = jitter.stage_ops(tuple(order))
        seq = [op for op in ops[:3] if op != jitter.NONE] + [3]
        assert seq + [op for op in ops[3:] if op != jitter.NONE] == order
        picked = table[24 + row, :, :3].argmax(1)
        for stage, op in enumerate(ops):
            assert table[24 + row, stage, :3].sum() == (op != jitter.NONE)
            assert op == jitter.NONE or int(picked[stage]) == op
    assert not table[:24, :, :3].any()  # jitter not applied: g = 0, matrices = the identity
    params = torch.zeros(2, ap.NUM_PARAMS)
    params[:, ap.BRIGHTNESS : ap.SATURATION + 1] = torch.tensor([1.3, 0.7, 1.2])
    params[:, ap.ORDER] = torch.tensor([5.0, 17.0])
    assert torch.equal(jitter.stage_matrices(params, table, ident), ident.expand(2, 6, 18))


def test_grayscale_weights_are_torchvisions():
    """The luma map's rows are rgb_to_grayscale's coefficients (ITU-R 601-2)."""
    from torchvision.transforms.v2 import functional as TF

    x = torch.eye(3).view(3, 3, 1, 1)  # pure red, green, blue pixels
    ref = TF.rgb_to_grayscale(x)[:, 0, 0, 0].double()
    assert torch.allclose(jitter.luma()[:, 0], ref, atol=1e-7)
    assert np.allclose(jitter.luma().numpy(), np.repeat(ref.numpy()[:, None], 3, axis=1))
