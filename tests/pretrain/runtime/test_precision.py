"""train.amp on CPU: the policy (pretrain/runtime/precision.py), the encoders alone under autocast
(negatives and loss once ran in bf16 under autocast), and the bf16 loss against fp32 over a
few steps."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from negmine_core.step import Batch
from pretrain import config
from pretrain.config import ConfigError
from pretrain.engine import loop
from pretrain.losses import infonce
from pretrain.runtime import precision
from tests.helpers.runs import first_losses

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
TINY = [
    "model.width=8",
    "train.batch_size=16",
    "moco.queue_size=32",
    "data.num_workers=0",
    "train.progress_bar=false",
]


def test_amp_policy(monkeypatch):
    assert precision.amp_dtype("off", CPU) is None
    assert precision.amp_dtype("bf16", CPU) == torch.bfloat16
    assert precision.amp_dtype("bf16", CUDA) == torch.bfloat16
    assert precision.amp_dtype("fp16", CUDA) == torch.float16
    assert precision.amp_dtype("auto", CUDA) == torch.bfloat16
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: True)
    assert precision.amp_dtype("auto", CPU) == torch.bfloat16
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    assert precision.amp_dtype("auto", CPU) is None
    with pytest.raises(ConfigError, match="train.amp=fp16 needs CUDA"):
        precision.amp_dtype("fp16", CPU)
    with pytest.raises(ConfigError, match="train.amp"):
        precision.amp_dtype("fp8", CPU)
    assert precision.full(torch.ones(2, dtype=torch.bfloat16)).dtype == torch.float32
    assert precision.full(torch.ones(2, dtype=torch.float64)).dtype == torch.float64


def test_fp16_on_cpu_is_a_config_error(tmp_path):
    cfg = config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *TINY, "train.amp=fp16"])
    with pytest.raises(ConfigError, match="fp16"):
        loop.setup(cfg)


def spy_step(run: loop.Run, monkeypatch) -> dict:
    """Record what the encoder's head, the strategy and the loss see in one step."""
    seen: dict = {}
    head = run.moco.encoder_q.head
    head.register_forward_hook(lambda m, i, o: seen.setdefault("head", o.dtype) and None)
    negatives, loss_forward = run.strategy.negatives, run.loss_fn.forward

    def spy_negatives(s):
        seen["neg"] = (s.emb.q.dtype, s.emb.k.dtype, torch.is_autocast_enabled("cpu"))
        return negatives(s)

    def spy_loss(step):
        seen["loss_in"] = (step.emb.q.dtype, step.emb.k.dtype, torch.is_autocast_enabled("cpu"))
        seen["step"] = dataclasses.replace(step, queue=step.queue.clone())  # enqueue is in place
        return loss_forward(step)

    monkeypatch.setattr(run.strategy, "negatives", spy_negatives)
    monkeypatch.setattr(run.loss_fn, "forward", spy_loss)
    x1, x2, y, _, *rows = next(iter(run.data.train_loader))
    seen["loss"] = loop.train_step(run, Batch.make(x1, x2, y, rows), 1.0)
    return seen


@pytest.mark.parametrize("force", [False, True])
def test_autocast_covers_the_encoders_only(tmp_path, monkeypatch, force):
    """bf16 encoders, float32 negatives and loss; ``force`` emulates CUDA's autocast on the CPU
    (the context Run.autocast once gave on CUDA, where the loss ran inside it)."""
    cfg = config.load("digits_moco.yaml", [
        f"out_dir={tmp_path}", *TINY, "train.amp=bf16", "negatives.name=mochi",
        "negatives.kwargs={num_hard: 16, num_mix: 8, num_query_mix: 4, warmup_epochs: 0}",
    ])  # fmt: skip
    run = loop.setup(cfg)
    if force:
        monkeypatch.setattr(
            loop.Run, "autocast", lambda self: torch.autocast("cpu", dtype=torch.bfloat16)
        )
    seen = spy_step(run, monkeypatch)
    assert seen["head"] == torch.bfloat16  # the encoder ran in bf16
    assert seen["neg"] == (torch.float32, torch.float32, False)
    assert seen["loss_in"] == (torch.float32, torch.float32, False)
    assert seen["loss"].dtype == torch.float32
    # the loss equals its float64 re-derivation from the same inputs to float32 precision (a bf16
    # logit matrix is off by ~1e-2)
    s = seen["step"]
    shared = s.extra.shared
    per_query = s.extra.per_query
    logits = infonce.moco_logits(
        s.emb.q.double(), s.emb.k.double(), s.queue.double(), run.loss_fn.temperature,
        None if shared is None else shared.double(),
        None if per_query is None else per_query.double(),
    )  # fmt: skip
    ref = infonce.info_nce(logits)
    assert abs(seen["loss"].item() - ref.item()) < 1e-5


def run_steps(tmp_path, amp: str, steps: int = 4) -> list[float]:
    cfg = config.load(
        "digits_moco.yaml", [f"out_dir={tmp_path / amp}", *TINY, f"train.amp='{amp}'", "seed=3"]
    )
    run = loop.setup(cfg)
    return first_losses(run, steps)


def test_bf16_loss_tracks_fp32_over_steps(tmp_path):
    """Same seed, data and initial weights: the bf16-encoder loss stays within 5 % of fp32's over
    4 steps (bf16 has 8 mantissa bits: ~0.4 % per rounding, the loss is ~ln(33) = 3.5)."""
    fp32 = run_steps(tmp_path, "off")
    bf16 = run_steps(tmp_path, "bf16")
    for a, b in zip(fp32, bf16, strict=True):
        assert abs(a - b) <= 0.05 * abs(a), (fp32, bf16)
    assert fp32 != bf16  # bf16 really ran (not a silent fp32 fallback)


def test_channels_last_policy(monkeypatch):
    """NHWC on CUDA always, on a CPU only under bf16 autocast (where oneDNN's bf16 kernels gain
    from it); never when the flag is off."""
    assert precision.channels_last(True, "off", CUDA)
    assert precision.channels_last(True, "bf16", CPU)
    assert not precision.channels_last(True, "off", CPU)
    assert not precision.channels_last(False, "bf16", CPU)
    assert not precision.channels_last(False, "auto", CUDA)
    for native in (True, False):
        monkeypatch.setattr(precision, "cpu_has_bf16", lambda native=native: native)
        assert precision.channels_last(True, "auto", CPU) is native


@pytest.mark.parametrize("amp", ["bf16", "off"])
def test_cpu_layout_follows_the_policy(tmp_path, monkeypatch, amp):
    """Under bf16 on a CPU the encoders' weights and the batch they see are channels_last, and a
    step trains; in fp32 both stay contiguous (NCHW)."""
    cfg = config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *TINY, f"train.amp='{amp}'"])
    run = loop.setup(cfg)
    convs = [m for m in run.moco.modules() if isinstance(m, torch.nn.Conv2d)]
    layout = torch.channels_last if amp == "bf16" else torch.contiguous_format
    assert convs and all(m.weight.is_contiguous(memory_format=layout) for m in convs)
    seen = []
    conv = convs[0]
    conv.register_forward_pre_hook(
        lambda m, i: seen.append(i[0].is_contiguous(memory_format=layout))
    )
    x1, x2, y, _, *rows = next(iter(run.data.train_loader))
    loss = loop.train_step(run, Batch.make(x1, x2, y, rows), 1.0)
    assert torch.isfinite(loss) and seen and all(seen)
