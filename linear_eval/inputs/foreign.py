"""Weights made elsewhere, mapped onto our encoder's backbone with a strict key check, so released
baselines run through the same protocols. Recognised layouts:

* MoCo v1/v2 (facebookresearch/moco ``main_moco.py``: ``moco_v2_800ep_pretrain.pth.tar``):
  ``{"state_dict": {"module.encoder_q.<torchvision name>": ...}, "arch": ...}``; the MLP head
  ``module.encoder_q.fc.*`` is dropped.
* A torchvision or timm ResNet state dict (``conv1.weight``, ``layer1.0.bn1.weight``, ...;
  ``fc.*`` dropped); also ``python -m pretrain export --to torchvision|timm`` output.
* A Lightning checkpoint whose ``state_dict`` holds the backbone as ``backbone.<torchvision
  name>``; the rest (heads, momentum copies, classifiers) is dropped. It is named after the
  library its other keys come from: solo-learn (``projector.*``, ``momentum_backbone.*``,
  ``classifier.*``), lightly's benchmark modules (``projection_head.*``, ``online_classifier.*``,
  ``backbone_momentum.*``, ...), else "Lightning". lightly saves no fixed layout: a backbone kept
  as ``nn.Sequential`` (``backbone.0.weight``, ...) has no torchvision names and is refused.

The evaluation config (dataset, preprocessing, eval settings) comes from ``--config`` (a shipped
name or YAML); ``model.arch`` comes from the file (MoCo's ``arch``, else the block layout) and
``model.cifar_stem`` from the shape of ``conv1`` (3x3 = CIFAR stem). The projection head is
freshly initialised (seeded) and meaningless: use backbone features (the default everywhere).
Results go to ``<file>.eval/`` beside the file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from pretrain import build, config
from pretrain.runtime import checkpoint_io
from pretrain.runtime.checkpoint_io import CheckpointError

MOCO = "module.encoder_q."


def backbone_weights(raw: object, path: Path) -> tuple[dict[str, torch.Tensor], str, str | None]:
    """(backbone state dict under torchvision names, layout name, arch named by the file)."""
    if isinstance(raw, dict) and raw.get("format") == checkpoint_io.FORMAT:
        raise config.ConfigError(  # a usage mistake (exit 2), not a bad file
            f"{path} is a negmine checkpoint, which carries its own config: drop --config (and "
            "--set); --data-root PATH points it at data moved since training"
        )
    if isinstance(raw, dict) and isinstance(raw.get("state_dict"), dict):
        sd = raw["state_dict"]
        if any(k.startswith(MOCO) for k in sd):
            out = {
                k[len(MOCO) :]: v
                for k, v in sd.items()
                if k.startswith(MOCO) and not k.startswith(MOCO + "fc.")
            }
            return out, "moco", raw.get("arch") if isinstance(raw.get("arch"), str) else None
        if any(k.startswith("backbone.") for k in sd):
            out = {k[len("backbone.") :]: v for k, v in sd.items() if k.startswith("backbone.")}
            out = {k: v for k, v in out.items() if not k.startswith("fc.")}
            return out, lightning_library(sd), None
    if isinstance(raw, dict) and "conv1.weight" in raw:
        out = {k: v for k, v in raw.items() if not k.startswith("fc.")}
        return out, "torchvision/timm state dict", None
    keys = list(raw)[:8] if isinstance(raw, dict) else type(raw).__name__
    raise CheckpointError(
        f"{path} is neither a negmine checkpoint nor a known layout (MoCo v1/v2 "
        f"'state_dict' with '{MOCO}*', a torchvision/timm state dict, a Lightning 'backbone.*'); "
        f"its top-level keys: {keys}"
    )


#: the keys beside ``backbone.*`` that name the library of a Lightning checkpoint: solo-learn's
#: BaseMethod/BaseMomentumMethod, lightly's benchmark and example modules
LIBRARY_KEYS = {
    "solo-learn": ("projector.", "momentum_backbone.", "momentum_projector.", "classifier."),
    "lightly": (
        "projection_head.",
        "prediction_head.",
        "online_classifier.",
        "backbone_momentum.",
        "projection_head_momentum.",
        "query_backbone.",
    ),
}


def lightning_library(sd: dict[str, torch.Tensor]) -> str:
    """ "solo-learn" or "lightly" by the other keys of a ``backbone.*`` state dict, else
    "Lightning" (a module of one's own, or both libraries' keys at once)."""
    named = [lib for lib, keys in LIBRARY_KEYS.items() if any(k.startswith(keys) for k in sd)]
    return named[0] if len(named) == 1 else "Lightning"


def infer_arch(sd: dict[str, torch.Tensor]) -> str | None:
    """resnet18/34/50 from the keys: bottleneck ``conv3`` = resnet50; else blocks in layer3."""
    if "layer1.0.conv3.weight" in sd:
        return "resnet50"
    blocks = {k.split(".")[1] for k in sd if k.startswith("layer3.")}
    return {2: "resnet18", 6: "resnet34"}.get(len(blocks))


def load(path: str | Path, cfg_name: str, overrides: list[str] | None = None) -> tuple:
    """(encoder, cfg, tag) for weights made elsewhere; CheckpointError names unmatched keys."""
    path = Path(path)
    raw = checkpoint_io.read(path)  # CheckpointError without torch's advice to load unsafely
    sd, layout, arch = backbone_weights(raw, path)
    arch = arch or infer_arch(sd)
    conv1 = sd.get("conv1.weight")
    stem = [] if conv1 is None else [f"model.cifar_stem={str(conv1.shape[-1] == 3).lower()}"]
    named = [f"model.arch={arch}"] if arch else []
    cfg = config.load(cfg_name, [*named, *stem, *(overrides or [])])
    torch.manual_seed(cfg.seed)
    encoder = build.model(cfg).encoder_q
    checkpoint_io.load_module(encoder.backbone, sd, f"backbone ({layout} layout, {path.name})")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return encoder, cfg, f"foreign-{layout.split('/')[0].lower()}-{digest}"
