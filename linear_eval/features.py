"""Load a pretraining checkpoint's backbone and extract frozen features, cached per checkpoint."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from pretrain import build, checkpoint, config, data, datasets
from pretrain.config import Config
from pretrain.knn import extract


@dataclass
class Backbone:
    net: nn.Module  # the query encoder's backbone, pooled features (N, F)
    cfg: Config  # the pretraining config stored in the checkpoint
    epoch: int
    global_step: int
    tag: str  # identifies checkpoint + weights for the cache ("random-<seed>" for random init)


def load_backbone(ckpt_path: str | Path, random_init: bool = False) -> Backbone:
    """The query backbone from a checkpoint (or, with ``random_init``, the same architecture with
    the run's seed and no training: the baseline every kNN number should be read against)."""
    state = checkpoint.load(ckpt_path)
    cfg = config.from_dict(state["config"], source=f"{ckpt_path} (config)")
    torch.manual_seed(cfg.seed)
    moco = build.model(cfg)
    if random_init:
        tag = f"random-seed{cfg.seed}"
    else:
        checkpoint.load_module(moco, state["model"], "model")
        tag = f"step{state['global_step']}-{_digest(Path(ckpt_path))}"
    net = moco.encoder_q.backbone.eval().requires_grad_(False)
    return Backbone(net, cfg, state["epoch"], state["global_step"], tag)


def _digest(path: Path) -> str:
    st = path.stat()
    return hashlib.sha1(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:10]


def features(
    bb: Backbone,
    split: str,
    device: torch.device,
    cache_dir: Path | None,
    batch_size: int = 256,
    num_workers: int = 0,
    data_root: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Backbone features (N, F) and labels (N,) of ``split`` under the eval transform, cached at
    ``cache_dir/<dataset>-<split>-<tag>.pt``."""
    d = bb.cfg.data
    path = cache_dir / f"{d.name}-{split}-{bb.tag}.pt" if cache_dir else None
    if path is not None and path.exists():
        cached = torch.load(path, weights_only=True)
        return cached["features"], cached["labels"]
    base = datasets.build(d.name, data_root or d.root, split)
    ds = data.Transformed(base, build.eval_transform(d))
    feats, labels = extract(
        bb.net.to(device), build.eval_loader(ds, batch_size, num_workers), device
    )
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        checkpoint.save({"features": feats, "labels": labels}, path)
    return feats, labels
