"""train.cuda_graphs: the config key, its refusals (exit 2 naming the key and why), agreement with
the documented host-sync counts, the sync-free step it captures (CUDA's split-BN path forced), and
the capture/replay bookkeeping of CapturedStep with the CUDA calls replaced (no GPU here)."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import pytest
import torch

import negatives
from negatives.none import NoNegatives
from negmine_core.contract.sync_counter import SyncCounter
from negmine_core.step import Batch
from pretrain import __main__ as cli
from pretrain import config, losses
from pretrain.config import ConfigError
from pretrain.engine import cuda_graphs, loop
from pretrain.engine.cuda_graphs import CapturedStep, refusal, unverified
from pretrain.losses import InfoNCE, Loss, moco_logits
from pretrain.model.split_bn import use_path
from tests.helpers import count_ops
from tests.helpers.count_steps import loss_overrides, strategy_overrides

TINY = ["model.width=8", "train.batch_size=16", "moco.queue_size=64", "data.num_workers=0"]


def load(*overrides: str) -> config.Config:
    return config.load("digits_moco.yaml", [*TINY, *overrides])


def test_the_key_is_auto_on_or_off_and_yamls_booleans_read_as_on_and_off():
    assert config.load("digits_moco.yaml").train.cuda_graphs == "auto"
    assert load("train.cuda_graphs=true").train.cuda_graphs == "on"  # YAML's true: older configs
    assert load("train.cuda_graphs=false").train.cuda_graphs == "off"
    for bad in ("3", "yes_please", "captured"):
        with pytest.raises(ConfigError, match="train.cuda_graphs"):
            load(f"train.cuda_graphs={bad}")


@pytest.mark.parametrize(
    ("recipe", "device", "world", "captured"),
    [
        ("cifar10_moco.yaml", "cuda", 1, True),  # the verified step: captured by default
        ("cifar10_moco.yaml", "cpu", 1, False),  # no CUDA: eager
        ("cifar10_moco.yaml", "cuda", 2, False),  # DDP: eager
        ("cifar10_moco_sym.yaml", "cuda", 1, False),  # capturable, not compared with eager on a GPU
        ("cifar10_supcon.yaml", "cuda", 1, False),
        ("cifar10_mioc.yaml", "cuda", 1, False),  # refused: MiOC is not declared capturable
    ],
)
def test_auto_captures_a_step_nothing_refuses_and_a_gpu_run_verified(recipe, device, world,
                                                                     captured, capsys):  # fmt: skip
    cfg = config.load(recipe)
    assert cuda_graphs.chosen(cfg, device, world) is captured
    said = capsys.readouterr().out
    # on CUDA an eager auto says why; a CPU run says nothing (eager is its only path)
    eager_said = "train.cuda_graphs=auto: the step runs eager" in said
    assert eager_said == (not captured and device == "cuda")
    if recipe == "cifar10_moco_sym.yaml":
        assert "moco.symmetric_keys has not been compared with eager on a GPU" in said
        assert "the verified runs used neither loss.symmetric nor moco.symmetric_keys" in said
    if recipe == "cifar10_supcon.yaml":
        assert "loss 'supcon' does not declare capture_verified = True" in said


def test_on_captures_any_step_nothing_refuses_and_off_none():
    sym = config.load("cifar10_moco_sym.yaml", ["train.cuda_graphs=on"])
    assert cuda_graphs.chosen(sym, "cuda", 1) is True
    off = config.load("cifar10_moco.yaml", ["train.cuda_graphs=off"])
    assert cuda_graphs.chosen(off, "cuda", 1) is False
    mioc = config.load("cifar10_mioc.yaml", ["train.cuda_graphs=on"])
    with pytest.raises(ConfigError, match="'train.cuda_graphs' = 'on' is refused: strategy 'mioc'"):
        cuda_graphs.chosen(mioc, "cuda", 1)


def test_cpu_run_exits_2_naming_the_key_and_the_reason(tmp_path, capsys):
    status = cli.main(["--cfg", "digits_moco.yaml", f"out_dir={tmp_path}", *TINY,
                       "train.cuda_graphs=on"])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 2, err
    assert "train.cuda_graphs" in err and "need a CUDA device (this run is on cpu)" in err
    assert not (tmp_path / "checkpoints").exists()  # refused before any work


def test_the_digits_recipe_is_accepted_on_one_cuda_device():
    assert refusal(load(), "cuda", 1) is None
    assert refusal(load("negatives.name=mochi"), "cuda", 1) is None  # warm-up 10: whole epochs
    assert refusal(config.load("cifar10_moco.yaml"), "cuda", 1) is None


@pytest.mark.parametrize(
    ("overrides", "world", "reason"),
    [
        ([], 2, "DDP"),
        (["train.compile=true"], 1, "train.compile is on"),
        (["train.amp=fp16"], 1, "GradScaler"),
        (["train.lr_per_epoch=false"], 1, "train.lr_per_epoch=false"),
        (["eval.online_probe=true"], 1, "online probe"),
        (["loss.name=cider"], 1, "loss 'cider' syncs 1 time(s) per step (syncs_per_step): the"),
        (["negatives.name=mioc"], 1, "never captured in a CUDA graph on a GPU"),
        (["loss.name=ring"], 1, "(step_state): its band anneals"),
        (
            [
                "negatives.name=adco",
                "negatives.kwargs={bank_size: 32}",
                "loss.name=nt_xent",
                "loss.contrast_queue=false",
            ],
            1,
            "fill count",
        ),  # fmt: skip
        (["negatives.name=mochi", "negatives.kwargs={warmup_epochs: 0.5}"], 1, "whole number"),
    ],
)
def test_refusals_name_the_reason(overrides, world, reason):
    why = refusal(load(*overrides), "cuda", world)
    assert why is not None and reason in why, why


def test_the_refusal_reads_what_every_loss_and_strategy_declares():
    """Every registered loss and strategy (plugins included): refused exactly when its class
    declares host syncs per step, per-step Python state, or no capturable = True, with a reason
    that names the attribute."""

    def expect(cls):
        if cls.syncs_per_step:
            return "(syncs_per_step)"
        if cls.step_state:
            return "(step_state)"
        return None if cls.capturable else "(capturable = False)"

    for name in losses.list_losses():
        cfg = load(*loss_overrides(name))
        cls = losses.registry.get(name)
        why = refusal(cfg, "cuda", 1)
        assert (why is None) == (expect(cls) is None), (name, why)
        assert why is None or (expect(cls) in why and f"loss {name!r}" in why), (name, why)
    for name in negatives.list_strategies():
        extra = ["loss.name=nt_xent"] if negatives.strategies.get(name).replaces_queue else []
        cfg = load(*strategy_overrides(name), *extra)
        cls = negatives.strategies.get(name)
        why = refusal(cfg, "cuda", 1)
        assert (why is None) == (expect(cls) is None), (name, why)
        assert why is None or (expect(cls) in why and f"strategy {name!r}" in why), (name, why)


def test_cuda_graphs_holds_no_names():
    """The refusal reads the classes' attributes: no registered name appears in the module."""
    source = (Path(cuda_graphs.__file__)).read_text()
    for name in [*losses.list_losses(), *negatives.list_strategies()]:
        assert f"'{name}'" not in source and f'"{name}"' not in source, name


def old_auto(cfg: config.Config) -> bool:
    """``auto``'s rule before the classes declared ``capture_verified`` (pretrain/engine/
    cuda_graphs.py at 5944e36): nothing refuses, and the step is in ``VERIFIED = {(InfoNCE,
    NoNegatives, False, False)}`` (loss class, strategy class, loss.symmetric,
    moco.symmetric_keys)."""
    step = (losses.registry.get(cfg.loss.name), negatives.strategies.get(cfg.negatives.name),
            cfg.loss.symmetric, cfg.moco.symmetric_keys)  # fmt: skip
    return refusal(cfg, "cuda", 1) is None and step == (InfoNCE, NoNegatives, False, False)


def test_auto_resolves_as_before_for_every_registered_loss_strategy_and_layout(capsys):
    """Every registered loss x strategy x (loss.symmetric, moco.symmetric_keys): ``auto``
    captures exactly the steps the old rule captured, and an eager one says which class or
    layout switch no GPU run verified."""
    base = load()
    steps = itertools.product(losses.list_losses(), negatives.list_strategies(),
                              (False, True), (False, True))  # fmt: skip
    captured = []
    for loss, strategy, symmetric, keys in steps:
        cfg = copy.deepcopy(base)
        cfg.loss.name, cfg.negatives.name = loss, strategy
        cfg.loss.symmetric, cfg.moco.symmetric_keys = symmetric, keys
        step = (loss, strategy, symmetric, keys)
        assert cuda_graphs.chosen(cfg, "cuda", 1) is old_auto(cfg), step
        said = capsys.readouterr().out
        if old_auto(cfg):
            captured.append(step)
            continue
        why = refusal(cfg, "cuda", 1) or unverified(cfg)
        assert f"the step runs eager: {why}" in said, step
        if refusal(cfg, "cuda", 1) is None:
            named = [f"loss {loss!r}"] if loss != "infonce" else []
            named += [f"strategy {strategy!r}"] if strategy != "none" else []
            for who in named:
                assert f"{who} does not declare capture_verified = True" in why, (step, why)
            for key, on in (("loss.symmetric", symmetric), ("moco.symmetric_keys", keys)):
                assert (key in why.split(" has not")[0]) is on, (step, why)
    assert captured == [("infonce", "none", False, False)]


class VerifiedPlugin(Loss):
    """A plugin's loss whose author compared its captured step with eager on a GPU."""

    capturable = True
    capture_verified = True

    def forward(self, s):
        logits = moco_logits(s.emb.q, s.emb.k, s.queue, self.temperature, s.extra.shared)
        return torch.nn.functional.cross_entropy(logits, torch.zeros_like(logits[:, 0]).long())


class InfoNCEVariant(InfoNCE):
    """A subclass of a verified loss: another step, not verified by its parent's run."""


def test_auto_captures_a_plugin_that_declares_its_step_verified_but_not_a_subclass():
    with losses.registry.registered("verified_plugin", VerifiedPlugin) as name:
        assert unverified(load(f"loss.name={name}")) is None
    with losses.registry.registered("infonce_variant", InfoNCEVariant) as name:
        why = unverified(load(f"loss.name={name}"))
        assert why is not None and "loss 'infonce_variant' does not declare capture_verified" in why


def test_cuda_graphs_holds_no_loss_or_strategy_class():
    """The classes declare what a GPU run verified: the trainer imports none of them."""
    classes = [*map(losses.registry.get, losses.list_losses()),
               *map(negatives.strategies.get, negatives.list_strategies())]  # fmt: skip
    held = [k for k, v in vars(cuda_graphs).items() if any(v is c for c in classes)]
    assert not held, held


@pytest.mark.parametrize("recipe", ["digits_moco", "cifar10_moco"])
def test_the_captured_step_is_sync_free_on_the_device_path(recipe, tmp_path):
    """What the graph would capture (loop.train_step, split BN on the fused aten path, the
    device augmentation) makes no host sync: a capture would otherwise fail."""
    cfg = config.load(f"{recipe}.yaml", [f"out_dir={tmp_path}",
                                         *count_ops.overrides(recipe, "none")])  # fmt: skip
    assert refusal(cfg, "cuda", 1) is None
    run = loop.setup(cfg)
    use_path(run.moco, "fused")  # triton's: pretrain/model/test_split_bn_triton.py (no sync either)
    run.data.sampler.set_epoch(0, 0)
    run.moco.train()
    for i, (x1, x2, y, _, *rows) in enumerate(run.data.train_loader):
        with SyncCounter() as syncs:
            loop.train_step(run, Batch.make(x1, x2, y, rows), 1.5)
        assert syncs.count == 0, syncs.report()
        if i == 1:
            break
    run.log.close()


class FakeGraph:
    """Stands in for torch.cuda.CUDAGraph: counts replays."""

    def __init__(self) -> None:
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1


class Recorder:
    """A fake run and step: records eager calls and captures instead of touching CUDA."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.eager, self.captured = 0, []
        self.optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
        self.cfg = load()

        def eager(step: CapturedStep, run: Recorder, batch: Batch, epoch: float) -> str:
            self.eager += 1
            return "eager"

        def capture(step: CapturedStep, run: Recorder, batch: Batch, epoch: float) -> None:
            step.inputs = batch.map(torch.clone)
            step.graph, step.loss = FakeGraph(), torch.zeros(())
            self.captured.append((run.optimizer.param_groups[0]["lr"], epoch))

        monkeypatch.setattr(CapturedStep, "eager_on_side_stream", eager)
        monkeypatch.setattr(CapturedStep, "capture", capture)


def test_captured_step_warms_up_captures_replays_and_recaptures(monkeypatch):
    run = Recorder(monkeypatch)
    step = CapturedStep(lambda *a: None, warmup=2)
    batch = [torch.full((4, 3), float(i)) for i in range(3)]
    assert [step(run, Batch.make(*batch), 0.1) for _ in range(2)] == ["eager", "eager"]
    for e in (0.2, 0.3, 0.9):  # one capture, then replays, within the epoch and lr
        new = [torch.rand(4, 3) for _ in range(3)]
        step(run, Batch.make(*new), e)
        assert all(torch.equal(a, b) for a, b in zip(step.inputs.tensors(), new, strict=True))
    assert run.captured == [(0.1, 0.2)] and step.graph.replays == 3
    step(run, Batch.make(*batch), 1.0)  # a new epoch: re-captured
    run.optimizer.param_groups[0]["lr"] = 0.05
    step(run, Batch.make(*batch), 1.5)  # a new lr: re-captured
    assert run.captured == [(0.1, 0.2), (0.1, 1.0), (0.05, 1.5)]
    with pytest.raises(RuntimeError, match="train.cuda_graphs: a batch of shapes"):
        step(run, Batch.make(torch.zeros(2, 3), *batch[1:]), 1.6)


def test_captured_step_runs_eager_during_the_lr_warmup(monkeypatch):
    run = Recorder(monkeypatch)
    run.cfg = load("train.warmup_epochs=2")
    step = CapturedStep(lambda *a: None, warmup=0)
    batch = [torch.zeros(4, 3) for _ in range(3)]
    assert step(run, Batch.make(*batch), 1.9) == "eager" and not run.captured
    step(run, Batch.make(*batch), 2.0)
    assert run.captured == [(0.1, 2.0)]
