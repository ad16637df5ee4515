"""``train.cuda_graphs``: the whole training step (``step.train_step``) captured as one CUDA graph
and replayed, so the host launches one graph instead of ~1,200 kernels per step.

Follows PyTorch's whole-network capture recipe (docs: CUDA semantics, "CUDA Graphs", whole-network
capture): warm-up steps on a side stream, ``torch.cuda.graph`` around forward, backward and
``optimizer.step()``, then per step a copy of the batch into the captured input tensors and one
``replay()``. The graph's Python values are frozen at capture: the learning rate (re-captured when
it changes, i.e. once per epoch with ``train.lr_per_epoch``; eager during ``train.warmup_epochs``,
whose lr changes every step), the whole epoch number (re-captured
at each epoch, for epoch-indexed branches such as MoCHi's warm-up) and the input shapes (a batch
of another shape raises).

``train.cuda_graphs: auto`` (the default) captures on a CUDA device wherever :func:`refusal` finds
nothing, and says why it runs eager otherwise; ``on`` makes a refusal a config error (exit 2,
naming the key and why); ``off`` is eager. On an H200 (2026-11-28, torch 2.11, ``cifar10_moco``,
bf16, resident) the captured epoch took 1.2 s against 4.0 s eager, the losses of 10 steps agreeing
within 7e-4 (benchmarks/RESULTS.md, "GPU suite 2026-11-28T18:10Z"; the GPU suite's ``graphs``
part compares 20 steps and a checkpoint and resume against eager).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import torch

import negatives
from negmine_core.contract.declarations import capture_verified
from negmine_core.step import Batch
from pretrain import losses
from pretrain.config import Config, ConfigError
from pretrain.runtime import dist


def declared(kind: str, name: str, cls: Any) -> list[tuple[bool, str]]:
    """The refusals a loss or strategy declares (its class attributes, see
    ``negatives.base.NegativeStrategy``): host syncs per step (a capture cannot read the device),
    Python state that changes per step (frozen in a graph), not declared capturable."""
    n = cls.syncs_per_step
    return [
        (n == 0, f"{kind} {name!r} syncs {n} time(s) per step (syncs_per_step): {cls.syncs_why}"),
        (
            not cls.step_state,
            f"{kind} {name!r}: Python state that changes per step would be "
            f"frozen in the graph (step_state): {cls.step_state}",
        ),
        (
            cls.capturable,
            f"{kind} {name!r} is not declared capturable (capturable = False): "
            f"{cls.why_not_capturable}",
        ),
    ]


def refusal(cfg: Config, device_type: str, world_size: int) -> str | None:
    """Why ``train.cuda_graphs`` cannot run with ``cfg`` here, or None when it can."""
    t, loss, strategy = cfg.train, cfg.loss.name, cfg.negatives.name
    checks = [
        (device_type == "cuda", f"CUDA graphs need a CUDA device (this run is on {device_type})"),
        (
            world_size == 1,
            "DDP's gradient all-reduce has not been captured here (one process "
            "only; batches are even at any world size: the sampler drops the rest)",
        ),
        (not t.compile, "train.compile is on: capture the eager step or compile, not both"),
        (t.amp != "fp16", "fp16's GradScaler checks for infs on the host every step"),
        (t.lr_per_epoch, "train.lr_per_epoch=false changes the lr (frozen at capture) every step"),
        (not cfg.eval.online_probe, "the online probe's accumulators are unchecked under capture"),
        *declared("loss", loss, losses.registry.get(loss)),
        *declared("strategy", strategy, negatives.strategies.get(strategy)),
        (
            whole_epoch_warmup(cfg),
            f"strategy {strategy!r}: its warmup_epochs is not a whole "
            "number (the graph is re-captured at whole epochs only)",
        ),
    ]
    return next((why for ok, why in checks if not ok), None)


#: The layout switches no GPU run has compared with eager under capture: the verified runs used
#: MoCo's own layout, each query against its own key, so ``auto`` runs a step with either switch
#: on eager whatever its classes declare. ``loss.symmetric``: both views as queries (2N x 2N);
#: ``moco.symmetric_keys``: view 1's keys in the step too (the two-direction loss).
UNVERIFIED_LAYOUT = ("loss.symmetric", "moco.symmetric_keys")


def unverified(cfg: Config) -> str | None:
    """Why ``auto`` leaves a capturable step eager: no GPU run compared its capture with eager, or
    None when one did. A GPU run verified a step when its loss and its strategy both declare
    ``capture_verified`` (``negmine_core.contract.Contract``; so far InfoNCE with ``none``:
    ``cifar10_moco`` on an H200, 2026-11-28 at d66eca4 and bf56f2b, the GPU suite's ``graphs``
    part, benchmarks/RESULTS.md) and none of :data:`UNVERIFIED_LAYOUT` is on. ``on`` captures
    any step nothing refuses."""
    loss, strategy = cfg.loss.name, cfg.negatives.name
    classes = {("loss", loss): losses.registry.get(loss)}
    classes["strategy", strategy] = negatives.strategies.get(strategy)
    why = [
        f"{kind} {name!r} does not declare capture_verified = True"
        for (kind, name), cls in classes.items()
        if not capture_verified(cls)
    ]
    switches = {
        "loss.symmetric": cfg.loss.symmetric,
        "moco.symmetric_keys": cfg.moco.symmetric_keys,
    }
    layout = [key for key in UNVERIFIED_LAYOUT if switches[key]]
    if layout:
        why.append(f"the verified runs used neither {' nor '.join(UNVERIFIED_LAYOUT)}")
    if not why:
        return None
    return (
        f"the step of loss {loss!r} with strategy {strategy!r}"
        f"{' and ' + ', '.join(layout) if layout else ''} has not been compared with eager on a "
        f"GPU (benchmarks/graphs_check.py: {'; '.join(why)}); train.cuda_graphs=on captures it"
    )


def chosen(cfg: Config, device_type: str, world_size: int) -> bool:
    """Whether this run's step is captured: ``train.cuda_graphs`` resolved on this device and
    rank count. ``on`` with a :func:`refusal` is a config error; ``auto`` captures a step
    nothing refuses and a GPU run verified (:func:`unverified`), and otherwise runs eager and
    says why on a CUDA device (on a CPU eager is the only path)."""
    mode = cfg.train.cuda_graphs
    if mode == "off":
        return False
    refused = refusal(cfg, device_type, world_size)
    if refused and mode == "on":
        raise ConfigError(
            f"config key 'train.cuda_graphs' = 'on' is refused: {refused}; "
            "set train.cuda_graphs=off (or auto: captured wherever it can be)"
        )
    if mode == "auto" and not refused:
        refused = unverified(cfg)
    if refused and device_type == "cuda" and dist.is_main():
        print(f"train.cuda_graphs=auto: the step runs eager: {refused}", flush=True)
    return not refused


def whole_epoch_warmup(cfg: Config) -> bool:
    """The strategy's ``warmup_epochs`` (given or its default; 0 without one) is a whole number:
    its epoch branch flips where the graph is re-captured anyway."""
    param = inspect.signature(negatives.strategies.get(cfg.negatives.name)).parameters
    default = param["warmup_epochs"].default if "warmup_epochs" in param else 0.0
    return float(cfg.negatives.kwargs.get("warmup_epochs", default)).is_integer()


Step = Callable[..., torch.Tensor]  # step.train_step(run, batch, epoch)


class CapturedStep:
    """``step`` captured once per (lr, whole epoch, input shapes) and replayed.

    Args:
        step: the eager step, ``step(run, batch, epoch) -> loss`` (``batch`` a
            :class:`negmine_core.step.Batch`).
        warmup: eager steps on a side stream before the first capture (cuDNN autotuning, the
            optimizer's momentum buffers, lazy CUDA state: none of it may happen in a capture).

    The returned loss is the graph's own output tensor, overwritten by the next replay: read it
    (or accumulate it) before the next step, as the training loop does.
    """

    def __init__(self, step: Step, warmup: int = 3) -> None:
        self.step, self.warmup, self.calls = step, warmup, 0
        self.graph: Any = None  # torch.cuda.CUDAGraph once captured
        self.key: tuple | None = None
        self.inputs: Batch | None = None  # the captured input batch
        self.loss: torch.Tensor | None = None

    def __call__(self, run: Any, batch: Batch, epoch: float) -> torch.Tensor:
        self.calls += 1
        if self.calls <= self.warmup or epoch < run.cfg.train.warmup_epochs:  # lr per step
            return self.eager_on_side_stream(run, batch, epoch)
        lr = run.optimizer.param_groups[0]["lr"]
        key = (lr, math.floor(epoch), tuple((t.shape, t.dtype) for t in batch.tensors()))
        if key != self.key:
            if self.key is not None and key[2] != self.key[2]:
                raise RuntimeError(
                    f"train.cuda_graphs: a batch of shapes {key[2]} after the captured "
                    f"{self.key[2]}; set train.cuda_graphs=false"
                )
            self.capture(run, batch, epoch)
            self.key = key
        for dst, src in zip(self.inputs.tensors(), batch.tensors(), strict=True):
            dst.copy_(src, non_blocking=True)
        self.graph.replay()
        return self.loss

    def eager_on_side_stream(self, run: Any, batch: Batch, epoch: float) -> Any:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            loss = self.step(run, batch, epoch)
        torch.cuda.current_stream().wait_stream(side)
        return loss

    def capture(self, run: Any, batch: Batch, epoch: float) -> None:
        """Capture one step on the current inputs' copies; nothing runs until ``replay``."""
        self.graph = self.loss = None  # release the previous graph's pool first
        self.inputs = batch.map(torch.clone)
        run.optimizer.zero_grad(set_to_none=True)  # gradients allocated in the graph's pool
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.loss = self.step(run, self.inputs, epoch)
        self.graph = graph
