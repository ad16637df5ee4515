"""``moco.symmetric_keys``: the MoCo CIFAR-10 demo's symmetric loss. One step of the trainer
(``pretrain.engine.step.train_step``) against the demo's own ``ModelMoCo`` copied in below, and
the config's refusals. Two gloo ranks against one process: tests/pretrain/runtime/test_ddp.py
(``symmetric_keys``).

Reference: facebookresearch/moco, branch ``colab-notebook``, ``colab/moco_cifar10_demo.ipynb`` at
f7364915bc4e9161427d7c6bb4f454fa0f171337, class ``ModelMoCo`` (``_momentum_update_key_encoder``,
``_dequeue_and_enqueue``, ``_batch_shuffle_single_gpu``, ``contrastive_loss``, ``forward`` with
``symmetric=True``), copied with ``.cuda()`` dropped and its encoders given rather than built:
the trainer's backbone and head before the normalisation (the demo's ``ModelBase`` returns
unnormalised features), so both sides start from the same weights.

The comparison is exact up to float32 rounding, split BatchNorm and key shuffle included: both
sides draw their shuffles with ``torch.randperm`` from the global RNG, seeded alike, in the same
order (view 2's keys, then view 1's), so they use the same permutations; a third run with
another seed shows that the permutation does change the loss here (the comparison is not blind
to it).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from negmine_core.step import Batch
from pretrain import config
from pretrain.config import ConfigError
from pretrain.engine import loop
from tests.helpers import inproc
from tests.helpers.paths import ROOT

N, K, SEED = 8, 48, 7  # the demo asserts K % (2N) == 0: 48 = 3 x 16
TINY = [
    "model.width=8",
    f"train.batch_size={N}",
    f"moco.queue_size={K}",
    "model.bn_splits=2",  # split BatchNorm: the key shuffle matters in one process
    "moco.symmetric_keys=true",
    "data.num_workers=0",
    "train.progress_bar=false",
    "train.amp='off'",
]


class DemoMoCo(nn.Module):
    """``ModelMoCo`` of the demo (f7364915), ``symmetric=True``; encoders and queue given."""

    def __init__(self, encoder_q, encoder_k, queue, m, T, symmetric=True):
        super().__init__()
        self.K = queue.shape[1]
        self.m = m
        self.T = T
        self.symmetric = symmetric
        self.encoder_q = encoder_q
        self.encoder_k = encoder_k
        self.register_buffer("queue", queue.clone())  # (dim, K), as the demo stores it
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data = param_k.data * self.m + param_q.data * (1.0 - self.m)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys):
        batch_size = keys.shape[0]
        ptr = int(self.queue_ptr)
        assert self.K % batch_size == 0  # for simplicity
        self.queue[:, ptr : ptr + batch_size] = keys.t()  # transpose
        ptr = (ptr + batch_size) % self.K  # move pointer
        self.queue_ptr[0] = ptr

    @torch.no_grad()
    def _batch_shuffle_single_gpu(self, x):
        idx_shuffle = torch.randperm(x.shape[0])
        idx_unshuffle = torch.argsort(idx_shuffle)
        return x[idx_shuffle], idx_unshuffle

    @torch.no_grad()
    def _batch_unshuffle_single_gpu(self, x, idx_unshuffle):
        return x[idx_unshuffle]

    def contrastive_loss(self, im_q, im_k):
        q = self.encoder_q(im_q)  # queries: NxC
        q = nn.functional.normalize(q, dim=1)
        with torch.no_grad():  # no gradient to keys
            im_k_, idx_unshuffle = self._batch_shuffle_single_gpu(im_k)
            k = self.encoder_k(im_k_)  # keys: NxC
            k = nn.functional.normalize(k, dim=1)
            k = self._batch_unshuffle_single_gpu(k, idx_unshuffle)
        l_pos = torch.einsum("nc,nc->n", [q, k]).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", [q, self.queue.clone().detach()])
        logits = torch.cat([l_pos, l_neg], dim=1)
        logits /= self.T
        labels = torch.zeros(logits.shape[0], dtype=torch.long)
        loss = nn.CrossEntropyLoss()(logits, labels)
        return loss, q, k

    def forward(self, im1, im2):
        with torch.no_grad():  # no gradient to keys
            self._momentum_update_key_encoder()
        if self.symmetric:
            loss_12, q1, k2 = self.contrastive_loss(im1, im2)
            loss_21, q2, k1 = self.contrastive_loss(im2, im1)
            loss = loss_12 + loss_21
            k = torch.cat([k1, k2], dim=0)
        else:
            loss, q, k = self.contrastive_loss(im1, im2)
        self._dequeue_and_enqueue(k)
        return loss


def unnormalised(encoder: nn.Module) -> nn.Module:
    """A copy of the trainer's encoder as the demo's ModelBase: backbone and head, no normalise
    (the parameters in the trainer's order, for the momentum update's zip)."""
    return nn.Sequential(copy.deepcopy(encoder.backbone), copy.deepcopy(encoder.head))


def demo_step(run: loop.Run, x1, x2, seed: int) -> tuple[DemoMoCo, torch.Tensor]:
    """The demo's forward and backward from ``run``'s current weights and queue."""
    ref = DemoMoCo(
        unnormalised(run.moco.encoder_q),
        unnormalised(run.moco.encoder_k),
        run.queue.keys.t(),
        m=run.cfg.moco.momentum,
        T=run.cfg.moco.temperature,
    ).train()
    torch.manual_seed(seed)
    loss = ref(x1, x2)
    loss.backward()
    return ref, loss.detach()


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


@pytest.fixture(scope="module")
def stepped(tmp_path_factory) -> tuple[loop.Run, DemoMoCo, torch.Tensor, torch.Tensor, float]:
    """(the run after one trainer step, the demo after one step from the same start, the
    trainer's loss, the demo's, the demo's loss with other shuffles)."""
    out = tmp_path_factory.mktemp("sym")
    run = loop.setup(config.load("digits_moco.yaml", [f"out_dir={out}", *TINY]))
    run.moco.train()
    g = torch.Generator().manual_seed(0)
    x1, x2 = torch.randn(2, N, 3, 16, 16, generator=g)
    with torch.no_grad():  # hard negatives: keys of other images (the random init's collapse
        # puts every embedding near one direction, far from normalize(randn) rows)
        run.queue.keys.copy_(run.moco.encoder_k(torch.randn(K, 3, 16, 16, generator=g)))
    y = torch.arange(N)
    ref, ref_loss = demo_step(run, x1, x2, SEED)
    other_shuffle = demo_step(run, x1, x2, SEED + 1)[1].item()
    torch.manual_seed(SEED)
    loss = loop.train_step(run, Batch.make(x1, x2, y), 0.0).detach()
    yield run, ref, loss, ref_loss, other_shuffle
    run.close()


def test_loss_is_the_demos_loss_12_plus_loss_21(stepped):
    run, _, loss, ref_loss, other_shuffle = stepped
    assert loss.item() > 6.0  # two cross entropies of about ln(1 + K) = 3.9 (one alone: ~4)
    assert abs(loss.item() - ref_loss.item()) <= 1e-5
    assert abs(other_shuffle - ref_loss.item()) > 1e-4  # the shuffle is live: same draws above


def test_query_encoder_gradients_are_the_demos(stepped):
    run, ref, _, _, _ = stepped
    ours = [p.grad for p in run.moco.encoder_q.parameters()]
    theirs = [p.grad for p in ref.encoder_q.parameters()]
    assert len(ours) == len(theirs) > 0 and all(g is not None for g in ours + theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert max_diff(a, b) <= 1e-5 * max(1.0, b.abs().max().item())


def test_key_encoder_after_the_one_momentum_update_is_the_demos(stepped):
    run, ref, _, _, _ = stepped
    ours, theirs = list(run.moco.encoder_k.parameters()), list(ref.encoder_k.parameters())
    assert len(ours) == len(theirs) > 0
    for a, b in zip(ours, theirs, strict=True):
        assert max_diff(a, b) <= 1e-6


def test_queue_holds_view_1_keys_then_view_2_keys_as_the_demo(stepped):
    run, ref, _, _, _ = stepped
    assert run.queue.ptr.item() == int(ref.queue_ptr) == 2 * N
    assert max_diff(run.queue.keys, ref.queue.t()) <= 1e-6
    labels = torch.cat([torch.arange(N), torch.arange(N), torch.full((K - 2 * N,), -1)])
    assert torch.equal(run.queue.labels, labels)


# ------------------------------------------------------------------------------------------------
# Refusals: the option and the strategy, loss or size it cannot serve, named together (exit 2)

REFUSED = {
    "negatives.name=mochi": "config key 'moco.symmetric_keys' = True cannot be combined with "
    "negatives 'mochi': a strategy's negatives are made from the first view's queries and keys "
    "only; use negatives.name=none",
    "loss.name=nt_xent": "config key 'moco.symmetric_keys' = True cannot be combined with loss "
    "'nt_xent': the MoCo CIFAR-10 demo's symmetric loss is two InfoNCE terms in MoCo's layout "
    "(loss.name=infonce); for both views as queries against each other use loss.symmetric with "
    "one of cider, firm, nt_xent, sincere, supcon",
    "kappa.hidden=16": "config key 'moco.symmetric_keys' = True cannot be combined with "
    "kappa.hidden=16 (a kappa head): its terms read the first view's queries and keys only; set "
    "kappa.hidden=0",
    "moco.queue_size=100": "config key 'moco.symmetric_keys' = True enqueues both views' keys, "
    "2 x train.batch_size (64) per step: moco.queue_size (100) must hold at least that (the "
    "demo: 4096 for 2 x 512)",
}


@pytest.mark.parametrize("override", sorted(REFUSED))
def test_config_names_the_option_and_what_it_cannot_serve(override):
    with pytest.raises(ConfigError) as info:
        config.load("digits_moco.yaml", ["moco.symmetric_keys=true", override])
    assert str(info.value) == REFUSED[override]
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    assert f"`{REFUSED[override]}`" in page  # quoted word for word


def test_pretrain_cli_exits_2_naming_both(tmp_path):
    done = inproc.pretrain("--cfg", "digits_moco.yaml", "moco.symmetric_keys=true",
                           "negatives.name=mioc", f"out_dir={tmp_path / 'run'}")  # fmt: skip
    assert done.returncode == 2
    assert "'moco.symmetric_keys'" in done.stderr and "negatives 'mioc'" in done.stderr
    assert not (tmp_path / "run").exists()


def test_the_multiview_layout_and_the_two_key_layout_exclude_each_other():
    """loss.symmetric needs a batch loss, the two-key layout InfoNCE: a config with both is
    refused (by loss.symmetric's rule with infonce, by this option's with a batch loss)."""
    for loss in ("infonce", "nt_xent"):
        rule = r"^config key '(loss\.symmetric|moco\.symmetric_keys)' = True "
        with pytest.raises(ConfigError, match=rule):
            config.load("digits_moco.yaml", ["moco.symmetric_keys=true", "loss.symmetric=true",
                                             f"loss.name={loss}"])  # fmt: skip
