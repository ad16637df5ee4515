"""A checkpoint (ours, or weights made elsewhere) as a frozen query encoder and what identifies
it (:class:`Model`), for :mod:`linear_eval.inputs.features` to extract features from."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import torch

from linear_eval.inputs import foreign
from pretrain import build, config
from pretrain.config import Config, ConfigError
from pretrain.model.encoders import Encoder
from pretrain.runtime import checkpoint_io


@dataclass
class Model:
    """A checkpoint's frozen query encoder and what identifies it."""

    encoder: Encoder  # eval mode, requires_grad False
    cfg: Config  # the pretraining config stored in the checkpoint
    epoch: int
    global_step: int
    tag: str  # identifies checkpoint + weights in cache keys ("random-seed<s>" for random init)
    ckpt: Path
    reference: dict[str, torch.Tensor] = field(repr=False, default_factory=dict)  # loaded weights
    out_dir: Path | None = None  # results folder of foreign weights (<file>.eval)
    train_set: dict | None = None  # the checkpoint's training-set identity (None: not recorded)

    @property
    def run_dir(self) -> Path:
        """RUN for ``RUN/checkpoints/<name>.pt`` (``<file>.eval`` for weights made elsewhere)."""
        return self.out_dir or self.ckpt.resolve().parent.parent

    @property
    def has_kappa(self) -> bool:
        return self.encoder.kappa_head is not None

    def assert_unchanged(self) -> None:
        """Raise RuntimeError if any encoder parameter or buffer (BatchNorm running statistics
        included) differs from the checkpoint's: MoCo's ``main_lincls.py`` ``sanity_check``."""
        changed = [
            k
            for k, v in self.encoder.state_dict().items()
            if not torch.equal(v.cpu(), self.reference[k])
        ]
        if changed:
            raise RuntimeError(f"the frozen encoder changed during evaluation: {changed[:5]}")


def load_foreign(path: str | Path, cfg_name: str, overrides: list[str] | None = None) -> Model:
    """Weights made elsewhere (:mod:`linear_eval.inputs.foreign`) as a :class:`Model`."""
    encoder, cfg, tag = foreign.load(path, cfg_name, overrides)
    encoder = encoder.eval().requires_grad_(False)
    _refuse_non_finite(encoder, Path(path))
    reference = {k: v.detach().clone().cpu() for k, v in encoder.state_dict().items()}
    p = Path(path)
    return Model(
        encoder, cfg, 0, 0, tag, p, reference, out_dir=p.resolve().parent / f"{p.name}.eval"
    )


def load_model(ckpt_path: str | Path, random_init: bool = False) -> Model:
    """The query encoder of a checkpoint (or, with ``random_init``, the same architecture with the
    run's seed and no training: the baseline every number should be read against).

    Raises:
        pretrain.runtime.checkpoint_io.CheckpointError: missing, corrupt or incompatible checkpoint.
    """
    path = Path(ckpt_path)
    try:
        state = checkpoint_io.load(path)
    except checkpoint_io.NotNegmineError as e:
        raise checkpoint_io.CheckpointError(
            f"{e}. Weights made elsewhere (an official MoCo v1/v2 checkpoint, a torchvision, timm, "
            "solo-learn or lightly ResNet) need --config CFG, a config naming the dataset and "
            f"evaluation settings, e.g. python -m linear_eval --ckpt {path} --config "
            "cifar10_moco.yaml [--set data.root=PATH]"
        ) from None
    try:
        cfg = config.from_dict(
            state["config"],
            source=f"{path} (config)",
            encoder_only=True,
            records=(state.get("provenance") or {}).get("plugins"),
        )
    except ConfigError as e:
        raise checkpoint_io.CheckpointError(
            f"the config stored in {path} is not usable: {e}"
        ) from e
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        moco = build.model(cfg)
    if random_init:
        tag = f"random-seed{cfg.seed}"
    else:
        checkpoint_io.load_module(moco, state["model"], "model")
        tag = f"step{state['global_step']}-{_digest(path)}"
    encoder = moco.encoder_q.eval().requires_grad_(False)
    _refuse_non_finite(encoder, path)
    reference = {k: v.detach().clone().cpu() for k, v in encoder.state_dict().items()}
    return Model(
        encoder,
        cfg,
        state["epoch"],
        state["global_step"],
        tag,
        path,
        reference,
        train_set=state.get("train_set"),
    )


def _refuse_non_finite(encoder: Encoder, path: Path) -> None:
    """Raise CheckpointError naming the tensors of ``encoder`` (parameters and BatchNorm
    statistics) that hold NaN or inf: their features mean nothing, and the frozen-encoder check
    would call them changed (NaN equals nothing, itself included)."""
    bad = [
        k
        for k, v in encoder.state_dict().items()
        if v.is_floating_point() and not bool(torch.isfinite(v).all())
    ]
    if bad:
        raise checkpoint_io.CheckpointError(
            f"checkpoint {path} holds weights that are not finite (NaN or inf) in {len(bad)} "
            f"tensor(s): {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}; features of these "
            "weights mean nothing: evaluate an earlier checkpoint (checkpoints/epoch_N.pt, kept "
            "with train.keep_every=N)"
        )


def file_id(path: Path) -> str:
    """``<absolute path>:<size>:<mtime ns>``: changes when the file is rewritten."""
    st = path.stat()
    return f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"


def _digest(path: Path) -> str:
    return hashlib.sha1(file_id(path).encode()).hexdigest()[:10]
