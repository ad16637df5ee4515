"""Export a checkpoint's query-encoder backbone for use in other frameworks.

    python -m pretrain export --ckpt RUN/checkpoints/last.pt --to torchvision --out r50.pth
    python -m pretrain export --ckpt RUN/checkpoints/last.pt --to timm --out r50_timm.pth
    python -m pretrain export --ckpt RUN/checkpoints/last.pt --to detectron2 --out r50.pkl

* ``torchvision`` / ``timm``: a plain state dict (``torch.save``) that loads with ``strict=True``
  into ``torchvision.models.<arch>()`` with ``fc = nn.Identity()`` and into
  ``timm.create_model("<arch>", num_classes=0)`` (both ResNets use the same parameter names), and
  gives the same pooled features as our encoder's backbone. The projection head is not exported.
* ``detectron2``: the layout of MoCo's ``detection/convert-pretrain-to-detectron2.py``: a pickle
  of ``{"model": {name: numpy array}, "__author__": "negmine", "matching_heuristics": True}`` with
  the keys renamed for detectron2's ResNet (``conv1``/``bn1`` -> ``stem.conv1``/
  ``stem.conv1.norm``, ``layerN`` -> ``res{N+1}``, ``bnK`` -> ``convK.norm``, ``downsample.0/1``
  -> ``shortcut``/``shortcut.norm``); ``num_batches_tracked`` is dropped (detectron2's frozen BN has
  no such buffer). Use it with ``MODEL.WEIGHTS r50.pkl`` and MoCo's ``PIXEL_MEAN/STD`` (RGB).

Refused, with the reason: ``resnet_small`` (no counterpart in any framework) and a CIFAR stem
(3x3 stride-1 conv1, no max-pool), which none of the three ResNets can hold with its weights.
"""

from __future__ import annotations

import argparse
import pickle
import re
import sys
from pathlib import Path

import torch

from pretrain import config
from pretrain.runtime import checkpoint_io, run_folder

TARGETS = ("torchvision", "timm", "detectron2")
PREFIX = "encoder_q.backbone."


class ExportError(ValueError):
    """The checkpoint cannot be exported to the requested framework (the message says why)."""


def backbone_state(state: dict, cfg: config.Config, target: str) -> dict[str, torch.Tensor]:
    """The backbone's parameters and buffers under torchvision's names (no ``fc``)."""
    if target not in TARGETS:
        raise ExportError(f"unknown target {target!r}; choose from {', '.join(TARGETS)}")
    if cfg.model.arch not in ("resnet18", "resnet34", "resnet50"):
        raise ExportError(
            f"model.arch={cfg.model.arch} has no {target} counterpart (only resnet18/34/50 export)"
        )
    if cfg.model.cifar_stem:
        raise ExportError(
            f"model.cifar_stem=true (3x3 stride-1 conv1, no max-pool): {target}'s {cfg.model.arch} "
            "has a 7x7 stride-2 conv1 followed by a max-pool, so these weights cannot be held "
            "by it; export an ImageNet-stem model"
        )
    out = {k[len(PREFIX) :]: v for k, v in state["model"].items() if k.startswith(PREFIX)}
    if not out:
        raise ExportError(f"the checkpoint holds no '{PREFIX}*' weights")
    return out


def detectron2_name(key: str) -> str:
    """MoCo's converter renaming, torchvision ResNet name -> detectron2 ResNet name."""
    if "layer" not in key:
        key = "stem." + key
    key = re.sub(r"layer([1-4])", lambda m: f"res{int(m.group(1)) + 1}", key)
    key = re.sub(r"bn([1-3])", r"conv\1.norm", key)
    return key.replace("downsample.0", "shortcut").replace("downsample.1", "shortcut.norm")


def export(ckpt: str | Path, target: str, out: str | Path) -> Path:
    """Write the export of ``ckpt`` for ``target`` to ``out`` atomically; returns ``out``."""
    state = checkpoint_io.load(ckpt)
    cfg = config.from_dict(
        state["config"],
        source=f"{ckpt} (config)",
        encoder_only=True,
        records=(state.get("provenance") or {}).get("plugins"),
    )
    sd = backbone_state(state, cfg, target)
    if target == "detectron2":
        model = {
            detectron2_name(k): v.detach().cpu().numpy()
            for k, v in sd.items()
            if not k.endswith("num_batches_tracked")
        }
        blob = {"model": model, "__author__": "negmine", "matching_heuristics": True}
        return run_folder.atomic_write(out, lambda fh: pickle.dump(blob, fh))
    weights = {k: v.detach().cpu().clone() for k, v in sd.items()}
    return run_folder.atomic_write(out, lambda fh: torch.save(weights, fh))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m pretrain export", description=__doc__.split("\n")[0]
    )
    p.add_argument("--ckpt", required=True, help="RUN/checkpoints/last.pt")
    p.add_argument("--to", required=True, choices=TARGETS)
    p.add_argument("--out", required=True, help="output file")
    args = p.parse_args(argv)
    try:
        path = export(args.ckpt, args.to, args.out)
    except checkpoint_io.CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (ExportError, config.ConfigError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"exported {args.ckpt} -> {path} ({args.to})", file=sys.stderr)
    return 0
