"""Which dtype runs where (``train.amp``), on CPU and CUDA.

Policy (README_cpu2.md, "precision"):

- the two encoders (backbone + head, the convolutions and matmuls that cost the time) run under
  ``torch.autocast`` in the chosen low precision (bf16 on CPU or CUDA, fp16 on CUDA);
- their outputs q and k are cast to float32 (float64 stays float64) *outside* autocast, so the
  negative strategy (MoCHi's mixing, MiOC's OC-SVM, which keeps its own float64 path), the queue,
  the logits (q·queue, the largest matmul of the loss) and the loss all run in float32: a bf16
  logit has 8 bits of mantissa, i.e. an error of ~0.03 on 1/T = 5..10 scaled cosines;
- ``auto`` means bf16 on CUDA, and on a CPU with native bf16 arithmetic (AVX512-BF16 or AMX),
  fp32 on any other CPU (where bf16 is emulated and slower than fp32).
"""

from __future__ import annotations

import contextlib

import torch

from negmine_core.step import full  # noqa: F401  (float32 of the encoders' outputs)
from pretrain.errors import ConfigError

CHOICES = ("auto", "bf16", "fp16", "off")


def cpu_has_bf16() -> bool:
    """Native bf16 arithmetic on this CPU (AVX512-BF16 or AMX tiles)."""
    cpu = torch.cpu
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def amp_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of the encoders for ``train.amp`` on ``device`` (None = no autocast).

    Raises:
        ConfigError: ``fp16`` on a CPU (no loss scaling there; use bf16 or off).
    """
    if amp not in CHOICES:
        raise ConfigError(f"train.amp must be one of {', '.join(CHOICES)}, got {amp!r}")
    if amp == "off":
        return None
    if device.type == "cuda":
        return torch.float16 if amp == "fp16" else torch.bfloat16
    if device.type != "cpu":
        return None
    if amp == "fp16":
        raise ConfigError(
            "train.amp=fp16 needs CUDA (loss scaling); on a CPU use bf16, auto or off"
        )
    if amp == "auto" and not cpu_has_bf16():
        return None
    return torch.bfloat16


def channels_last(flag: bool, amp: str, device: torch.device) -> bool:
    """Whether ``train.channels_last`` applies: on CUDA always, on a CPU only where the encoders
    run in bf16 (oneDNN's bf16/AMX convolutions prefer NHWC: ResNet-18 at 32 px, batch 128,
    forward + backward on a 2-core Xeon with AMX: bf16 159 -> bf16 + channels_last 205
    images/s; in fp32 71 -> 79, and 0.95x under load on an AVX2 EPYC, so fp32 CPU runs stay
    contiguous)."""
    if not flag:
        return False
    return device.type == "cuda" or amp_dtype(amp, device) == torch.bfloat16


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for the encoders, or a null context for ``dtype=None``."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)
