"""FNC (Huynh et al. 2022) against a numpy re-derivation of google-research/fnc
``add_contrastive_loss_with_memory`` (the max-over-views score, top-k AND threshold mask, the
attraction loss) and the paper's elimination loss; and the support views of the data pipeline.
The loss comparison covers the gradient with respect to q as well as the value: autograd on ours
against central finite differences of the numpy form (``fd_grad``). The false-negative mask is a
hard top-k and threshold, but of the keys' and support views' scores against the queue, all
constants: the loss is smooth in q, and the differences never move the mask."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pretrain import config, losses
from pretrain.data import views
from pretrain.losses import fnc
from pretrain.losses.base import Step
from tests.helpers.fd_grad import assert_grad_matches_fd, autograd
from tests.helpers.vectors import unit


def np_fnc(q, k, support, queue, t, topk, threshold, mode):
    views_ = np.concatenate([k[:, None], support], axis=1)  # (N, 1 + V, D)
    scores = np.einsum("nvd,md->nvm", views_, queue).max(axis=1)
    dense = (scores > threshold).astype(float)
    top = np.zeros_like(scores)
    idx = np.argsort(-scores, axis=1, kind="stable")[:, :topk]
    np.put_along_axis(top, idx, 1.0, axis=1)
    mask = dense * top
    pos = np.sum(q * k, axis=1) / t
    neg = q @ queue.T / t
    logits = np.concatenate([pos[:, None], neg], axis=1)
    if mode == "attraction":  # the official numerator: (positives + false negatives) / count
        num = (pos + np.sum(neg * mask, axis=1)) / (1.0 + mask.sum(1))
        lse = np.log(np.exp(logits).sum(1))
    else:
        num = pos
        lse = np.log(np.exp(pos) + (np.exp(neg) * (1 - mask)).sum(1))
    return float(np.mean(lse - num)), mask


@pytest.mark.parametrize("mode", ["attraction", "elimination"])
@pytest.mark.parametrize(("topk", "threshold"), [(10, 0.2), (3, -1.0), (50, 0.5)])
def test_fnc_matches_the_official_attraction_and_the_papers_elimination(mode, topk, threshold):
    n, v, d = 8, 3, 6
    q, k, queue = unit(n, d, seed=0), unit(n, d, seed=1), unit(40, d, seed=2)
    support = unit(n, v, d, seed=3)
    loss_fn = losses.create("fnc", temperature=0.1, mode=mode, fn_topk=topk, fn_threshold=threshold)
    ours = loss_fn(Step.single(q, k, queue=queue, support=support))
    ref, mask = np_fnc(q.numpy(), k.numpy(), support.numpy(), queue.numpy(), 0.1, topk,
                       threshold, mode)  # fmt: skip
    assert abs(ours.item() - ref) < 1e-10
    diag = loss_fn.diagnostics()
    assert diag["detected"].item() == pytest.approx(mask.sum(1).mean())
    assert diag["effective_negatives"].item() == pytest.approx(40 - mask.sum(1).mean())
    (grad,) = autograd(lambda v: loss_fn(Step.single(v, k, queue=queue, support=support)), q)
    fixed = (k.numpy(), support.numpy(), queue.numpy(), 0.1, topk, threshold, mode)
    assert_grad_matches_fd(grad, lambda v: np_fnc(v, *fixed)[0], q.numpy())


def test_no_false_negatives_is_infonce():
    q, k, queue = unit(5, 8, seed=4), unit(5, 8, seed=5), unit(20, 8, seed=6)
    step = Step.single(q, k, queue=queue, support=unit(5, 2, 8, seed=7))
    for mode in ("attraction", "elimination"):
        loss = losses.create("fnc", temperature=0.2, mode=mode, fn_threshold=1.0)(step)
        assert torch.allclose(loss, losses.create("infonce", temperature=0.2)(step))


def test_detection_aggregates_by_max_over_views():
    queue = torch.eye(4, dtype=torch.float64)
    views_ = torch.zeros(1, 2, 4, dtype=torch.float64)
    views_[0, 0, 0] = 1.0  # view 0 matches candidate 0, view 1 candidate 2
    views_[0, 1, 2] = 1.0
    mask = fnc.detect(views_, queue, topk=3, threshold=0.5)
    assert mask.tolist() == [[True, False, True, False]]


def test_config_needs_support_views_on_the_device_path():
    with pytest.raises(config.ConfigError, match="support_views"):
        config.load("digits_moco.yaml", ["loss.name=fnc"])
    with pytest.raises(config.ConfigError, match="augment_on"):
        config.load("digits_fnc.yaml", ["data.augment_on=workers"])
    with pytest.raises(ValueError, match="support"):
        q, k, queue = unit(2, 4, seed=8), unit(2, 4, seed=9), unit(8, 4, seed=10)
        losses.create("fnc", temperature=0.1)(Step.single(q, k, queue=queue))


def test_support_views_leave_the_two_views_unchanged_and_replay():
    images = [(torch.randint(0, 255, (3, 20, 20), dtype=torch.uint8), 1) for _ in range(3)]
    spec = views.ViewSpec(image_size=16, crop_scale=(0.3, 1.0), affine_degrees=10.0,
                          affine_translate=0.1, jitter_strength=0.4, jitter_prob=0.8,
                          grayscale_prob=0.2, blur_prob=0.5, hflip_prob=0.5)  # fmt: skip
    plain = views.CropViews(images, spec, seed=3)
    with_support = views.CropViews(images, spec, seed=3, support_views=4)
    a, b = plain[(2, 1)], with_support[(2, 1)]
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and torch.equal(a[4], b[4][:2])
    assert b[4].shape[0] == 6 and b[5].shape == (4, 3, 16, 16)
    again = with_support[(2, 1)]
    assert torch.equal(again[5], b[5]) and torch.equal(again[4], b[4])  # replayable
    assert not torch.equal(b[5][0], b[5][1])  # distinct draws
