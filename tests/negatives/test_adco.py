"""AdCo (Hu et al. 2021) against a numpy re-derivation of maple-research-lab/AdCo
``training/train.py`` (the bank's closed-form gradient and its SGD update), and autograd."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import negatives
from negatives.adco import bank_gradient
from negmine_core.step import SetupContext, Step
from pretrain import config
from tests.helpers.vectors import unit


def np_official_update(q, k, w, v, mem_t, lr, wd, momentum):
    """update_network's memory-bank block (one process: all_reduce / world is the identity)."""
    d_norm = w / np.linalg.norm(w, axis=0, keepdims=True)
    l_pos = q @ k.T
    l_neg = q @ d_norm
    logits = np.concatenate([l_pos, l_neg], axis=1) / mem_t
    e = np.exp(logits - logits.max(1, keepdims=True))
    p_qd = (e / e.sum(1, keepdims=True))[:, l_pos.shape[1] :]
    g = q.T @ p_qd / logits.shape[0] - np.mean(p_qd * l_neg, axis=0) * d_norm
    g = -g / np.linalg.norm(w, axis=0) / mem_t
    v = momentum * v + g + wd * w
    return w - lr * v, v, g


def test_bank_gradient_is_the_official_closed_form_and_minus_the_autograd_gradient():
    q, k = unit(12, 8, seed=0), unit(12, 8, seed=1)
    w = torch.randn(8, 30, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    g, _ = bank_gradient(q, k, w, 0.02)
    _, _, g_ref = np_official_update(q.numpy(), k.numpy(), w.numpy(), 0, 0.02, 3.0, 1e-4, 0.9)
    assert np.allclose(g.numpy(), g_ref, rtol=1e-9, atol=1e-12)
    # the ascent direction: -d/dW of the mean cross-entropy at mem_t (any target in the batch part)
    wr = w.clone().requires_grad_(True)
    logits = torch.cat([q @ k.T, q @ F.normalize(wr, dim=0)], 1) / 0.02
    F.cross_entropy(logits, torch.arange(12)).backward()
    assert torch.allclose(g, -wr.grad, rtol=1e-8, atol=1e-10)


def make(bank: int = 30, dim: int = 8, **kw) -> negatives.NegativeStrategy:
    s = negatives.create("adco", bank_size=bank, **kw)
    s.setup(SetupContext(dim=dim))
    return s.double()


def test_steps_follow_the_official_sgd_update_and_hand_out_the_old_bank():
    torch.manual_seed(0)
    s = make(ad_init=False)
    w, v = s.W.numpy().copy(), s.v.numpy().copy()
    for t in range(3):
        q, k = unit(12, 8, seed=10 + t), unit(12, 8, seed=20 + t)
        extra = s.negatives(
            Step.single(q=q, k=k, queue=torch.zeros(0, 8), queue_labels=torch.zeros(0), epoch=0.0)
        )
        expected = (w / np.linalg.norm(w, axis=0)).T
        assert np.allclose(extra.shared.numpy(), expected)  # this step's negatives: the old bank
        w, v, _ = np_official_update(q.numpy(), k.numpy(), w, v, 0.02, 3.0, 1e-4, 0.9)
        assert np.allclose(s.W.numpy(), w, rtol=1e-9, atol=1e-12)
        assert np.allclose(s.v.numpy(), v, rtol=1e-9, atol=1e-12)


def test_ad_init_writes_the_first_keys_and_the_fill_count_is_in_the_state():
    torch.manual_seed(1)
    s = make(bank=20)
    k1, k2 = unit(12, 8, seed=30), unit(12, 8, seed=31)
    s.negatives(
        Step.single(
            q=unit(12, 8, seed=32),
            k=k1,
            queue=torch.zeros(0, 8),
            queue_labels=torch.zeros(0),
            epoch=0.0,
        )
    )
    assert torch.equal(s.W[:, :12], k1.T) and (s.v[:, :12] == 0).all() and s.filled == 12
    s.negatives(
        Step.single(
            q=unit(12, 8, seed=33),
            k=k2,
            queue=torch.zeros(0, 8),
            queue_labels=torch.zeros(0),
            epoch=0.0,
        )
    )
    assert torch.equal(s.W[:, 12:20], k2[:8].T) and s.filled == 20
    state = s.state_dict()
    assert {"W", "v"} <= set(state)
    other = make(bank=20)
    other.load_state_dict(state)
    assert other.filled == 20 and torch.equal(other.W, s.W) and torch.equal(other.v, s.v)


def test_diagnostics_count_batch_keys_and_bank():
    s = make(bank=30, ad_init=False)
    labels = torch.tensor([0, 0, 1, 1, 1, -1])
    q, k = unit(6, 8, seed=40), unit(6, 8, seed=41)
    step = Step.single(q=q, k=k, queue=torch.zeros(0, 8), queue_labels=torch.zeros(0),
                                 epoch=0.0, labels=labels)  # fmt: skip
    s.negatives(step)
    d = s.diagnostics()
    assert d["effective_negatives"] == 5 + 30
    # rows 0,1: 1 same-label key each; rows 2-4: 2 each; row 5 unknown
    assert d["false_negative_fraction"].item() == pytest.approx((1 + 1 + 2 + 2 + 2) / 5 / 35)
    assert 0 < d["batch_prob"].item() <= 1


def test_config_asks_for_a_loss_without_the_queue():
    with pytest.raises(config.ConfigError, match="contrast_queue"):
        config.load("digits_moco.yaml", ["negatives.name=adco"])
    with pytest.raises(config.ConfigError, match="contrast_queue"):
        config.load("digits_moco.yaml", ["negatives.name=adco", "loss.name=nt_xent"])
    cfg = config.load("digits_adco.yaml")
    assert (cfg.loss.name, cfg.loss.contrast_queue) == ("nt_xent", False)


def test_bad_settings_are_refused():
    for bad in ({"bank_size": 0}, {"mem_t": 0.0}, {"momentum": 1.0}):
        with pytest.raises(ValueError):
            negatives.create("adco", **bad)


def test_a_yaml_key_without_its_space_is_named():
    with pytest.raises(config.ConfigError, match="space after the colon"):
        config.load("digits_adco.yaml", ["negatives.kwargs={bank_size:24}"])
