"""The key encoder under autocast with its weights cast once per forward: one ``_foreach_copy_``
into a low-precision copy of its convolution and linear weights (:func:`cast_tree`), where autocast
would cast each layer's weight itself (:class:`pretrain.model.encoders.MoCo` uses it). Both round
to nearest even, so the keys are the same bit for bit."""

from __future__ import annotations

import copy
from typing import NamedTuple

import torch
from torch import nn

CAST = (nn.Conv2d, nn.Linear)  # the layers whose weights autocast casts (its lower-precision list)


def cast_tree(
    module: nn.Module, dtype: torch.dtype
) -> tuple[nn.Module, list[torch.Tensor], list[torch.Tensor]]:
    """``module`` with the parameters of its :data:`CAST` layers in ``dtype``: (the module, those
    low-precision tensors, their float sources). Only the cast layers and the containers above them
    are new (shallow) objects; every other layer (BatchNorm with its running statistics, its split
    path and Triton parameters) is ``module``'s own, so a forward updates ``module``'s buffers.
    The new tensors are uninitialised (``_foreach_copy_`` fills them) and need no gradient; float64
    parameters stay shared (autocast leaves float64 alone)."""
    low: list[torch.Tensor] = []
    src: list[torch.Tensor] = []

    def clone(m: nn.Module) -> nn.Module:
        if isinstance(m, CAST):
            c = copy.copy(m)
            c._parameters = {}
            for name, p in m._parameters.items():
                if p is not None and p.dtype != torch.float64:  # what autocast casts (not double)
                    src.append(p)
                    p = nn.Parameter(torch.empty_like(p, dtype=dtype), requires_grad=False)
                    low.append(p)
                c._parameters[name] = p
            return c
        if not m._modules:
            return m  # shared: no cast layer below
        c = copy.copy(m)
        c._modules = {name: None if ch is None else clone(ch) for name, ch in m._modules.items()}
        return c

    return clone(module), low, src


class KeyCast(NamedTuple):
    """The key encoder under autocast (:func:`cast_tree`) and its dtype."""

    module: nn.Module
    low: list[torch.Tensor]
    src: list[torch.Tensor]
    dtype: torch.dtype
