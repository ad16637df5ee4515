"""ColorJitter batched as per-image colour matrices: brightness, contrast and saturation as
3 x 3 maps of the pixels, hue as torchvision's hexcone rotation, each image with its own factors
and its own op order of the 24 (``RandomApply([ColorJitter(s, s, s, s / 4)], p)``, He et al. 2020,
MoCo v2; Chen et al. 2020, SimCLR appendix A).

Pixels are rows of a channels-last batch ``x`` (N, P, 3). torchvision's three blends
(``transforms/v2/functional/_color.py``: ``_blend(image, other, f) = clamp(f image + (1 - f)
other, 0, 1)``) are, with g = f - 1 and the luma row w (``rgb_to_grayscale``'s ITU-R 601-2
weights), affine maps of the pixel row x followed by the clamp:

- brightness (other = 0): x (I + g I);
- contrast (other = the image's mean luma): x (I + g I) - g (w . mean(x)) 1;
- saturation (other = the pixel's luma): x (I + g (I - w 1^T)).

So one stage is ``clamp(x Mt + mean(x) Bt)``, one ``baddbmm`` for the whole batch, whatever op
each image takes there; an image with no op at a stage gets Mt = I, Bt = 0, an exact identity.
An image's order puts up to three blends before its hue step and up to three after; six stages
(3 before the hue, 3 after) serve every order, the hue step runs once for the batch. The stages'
matrices come from one table lookup (:func:`stage_table`) and one ``bmm``/``addcmul`` pair.
"""

from __future__ import annotations

import torch

from pretrain.data.augment_params import (
    BRIGHTNESS,
    CONTRAST,
    HUE,
    JITTER,
    ORDER,
    ORDERS,
    SATURATION,
)

# stage_matrices reads the three blend factors as one slice of columns
assert (CONTRAST, SATURATION) == (BRIGHTNESS + 1, BRIGHTNESS + 2)

GRAY_WEIGHTS = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale (ITU-R 601-2 luma)
NONE = 3  # a stage where the image takes no blend (hue's op index in ORDERS)
STAGES = 6  # 3 blend stages before the hue step, 3 after
BLEND = 3 + 9 + 9  # a table entry: the op's one-hot over (b, c, s), then E and B (3 x 3 each)
HUE_N = (6.0, 4.0, 2.0)  # the sector offsets n + 1 of r, g, b (see adjust_hue)


def luma() -> torch.Tensor:
    """w 1^T (3, 3): ``x @ luma()`` puts the pixel's luma in all three channels."""
    return torch.tensor(GRAY_WEIGHTS, dtype=torch.float64)[:, None].expand(3, 3).clone()


def basis(op: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(E, B) of blend ``op`` (0 brightness, 1 contrast, 2 saturation, else none), float64:
    with g = factor - 1 the stage is ``clamp(x (I + g E) + mean(x) (g B))`` (module doc)."""
    eye, wide, zero = torch.eye(3, dtype=torch.float64), luma(), torch.zeros(3, 3).double()
    if op == 0:
        return eye, zero
    if op == 1:
        return eye, -wide
    if op == 2:
        return eye - wide, zero
    return zero, zero


def stage_ops(order: tuple[int, ...]) -> list[int]:
    """The blend of each of the 6 stages for one op order (NONE where there is none): the ops
    before hue at stages 0..2 (position p at stage p), those after it at stages 3..5 (position
    p at stage p + 2)."""
    hue_at = order.index(3)
    before = [order[p] if p < hue_at else NONE for p in range(3)]
    return before + [order[p] if p > hue_at else NONE for p in range(1, 4)]


def stage_table(first_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(table (48, 6, BLEND), identity (6, 18)), float32. Row ``ORDER + 24 JITTER`` of the
    table holds, per stage, the one-hot of the image's blend and its E, B; rows 0..23 (jitter
    not applied) hold no blend. The identity holds (I, 0) per stage. Stage 0's matrices are
    scaled by ``first_scale``: the 1 / 255 of ``ToDtype`` folded into the first product."""
    table = torch.zeros(48, STAGES, BLEND, dtype=torch.float64)
    for row, order in enumerate(ORDERS.tolist()):
        for stage, op in enumerate(stage_ops(tuple(order))):
            e, b = basis(op)
            if op != NONE:
                table[24 + row, stage, op] = 1.0
            table[24 + row, stage, 3:] = torch.cat([e.flatten(), b.flatten()])
    ident = torch.cat([torch.eye(3).flatten(), torch.zeros(9)]).double().repeat(STAGES, 1)
    table[:, 0, 3:] *= first_scale
    ident[0] *= first_scale
    return table.float(), ident.float()


def stage_matrices(params: torch.Tensor, table: torch.Tensor, ident: torch.Tensor) -> torch.Tensor:
    """(N, 6, 18) float32: each image's (Mt, Bt) at each stage, from its parameter row: the
    table row of its order (jitter applied) or of no blend, g = factor - 1 of the stage's blend,
    then Mt, Bt = identity + g (E, B). Four small ops for the batch."""
    row = torch.add(params[:, ORDER], params[:, JITTER], alpha=24.0).long()
    entry = table[row]  # (N, 6, BLEND)
    g = torch.bmm(entry[..., :3], (params[:, BRIGHTNESS : SATURATION + 1] - 1.0)[:, :, None])
    return torch.addcmul(ident, g, entry[..., 3:])  # (N, 6, 18)


def blend(x: torch.Tensor, mt: torch.Tensor, bt: torch.Tensor) -> torch.Tensor:
    """One blend stage: ``clamp(x Mt + mean(x) Bt, 0, 1)`` with x (N, P, 3), Mt and Bt (N, 3, 3):
    brightness, contrast or saturation per image, or the identity (module doc)."""
    bias = torch.bmm(x.mean(dim=1, keepdim=True), bt)  # (N, 1, 3): the contrast's mean gray
    return torch.baddbmm(bias, x, mt).clamp_(0.0, 1.0)


def adjust_hue(
    x: torch.Tensor, shift: torch.Tensor, cycle: torch.Tensor, sectors: torch.Tensor
) -> torch.Tensor:
    """Rotate the hue of pixels x (N, P, 3) by ``shift`` (N,) turns in [-0.5, 0.5]
    (torchvision ``adjust_hue``: ``_rgb_to_hsv``, shift h, ``_hsv_to_rgb``). ``cycle`` and
    ``sectors`` are :func:`hue_constants` on x's device.

    Fused, with torchvision's formulas: the chroma C = max - min and v = max are unchanged by the
    shift, and v s = C, so only the hue sector is computed,

        6 h = (g - b) / C if max = r, else 2 + (b - r) / C if max = g, else 4 + (r - g) / C

    (torchvision's tie order: the first maximal channel; C = 0 gives h = 0 and a gray pixel that
    stays put), ``cycle`` giving the numerators x_{i+1} - x_{i+2} of every channel i. Channel j
    comes back as v - C clamp(min(k, 4 - k), 0, 1), k = (n_j + 6 (h + shift)) mod 6 with n =
    5, 3, 1 for r, g, b (torchvision's sector table in closed form), written as
    (v - 2 C) + C clamp(|(k + 1) mod 6 - 3|, 1, 2): the same value for every k in [0, 6)."""
    value, first = x.max(dim=2, keepdim=True)  # (N, P, 1) each: max and its first channel
    chroma = value - x.amin(dim=2, keepdim=True)
    sector = torch.matmul(x, cycle).gather(2, first)  # (N, P, 1): x_{i+1} - x_{i+2}, i = argmax
    offset = torch.add(sectors, shift[:, None, None], alpha=6.0)  # (N, 1, 3): n + 1 + 6 s
    turn = torch.add(offset, first, alpha=2.0)  # (N, P, 3): + 2 i
    k = torch.addcdiv(turn, sector, chroma.clamp(min=torch.finfo(x.dtype).tiny)).remainder_(6.0)
    wave = k.sub_(3.0).abs_().clamp_(1.0, 2.0)
    return torch.addcmul(torch.sub(value, chroma, alpha=2.0), chroma, wave)


def hue_constants() -> tuple[torch.Tensor, torch.Tensor]:
    """(cycle, sectors): D^T (3, 3) with ``x @ D^T`` = (g - b, b - r, r - g) per pixel, and
    ``HUE_N`` as (1, 1, 3)."""
    cycle = torch.tensor([[0.0, 1.0, -1.0], [-1.0, 0.0, 1.0], [1.0, -1.0, 0.0]]).T.contiguous()
    return cycle, torch.tensor(HUE_N).view(1, 1, 3)


def color_jitter(
    x: torch.Tensor,
    params: torch.Tensor,
    mb: torch.Tensor,
    cycle: torch.Tensor,
    sectors: torch.Tensor,
) -> torch.Tensor:
    """ColorJitter on pixels x (N, P, 3) with the stages' matrices ``mb`` (N, 6, 18) of
    :func:`stage_matrices` and the constants of :func:`hue_constants`: 3 blend stages, the hue
    step (kept only where the image's jitter flag is set: an exact ``lerp`` by the 0/1 flag),
    3 blend stages."""
    n = x.shape[0]
    for stage in range(STAGES):
        if stage == 3:
            hue = adjust_hue(x, params[:, HUE], cycle, sectors)
            x = torch.lerp(x, hue, params[:, JITTER].view(n, 1, 1))
        mt, bt = mb[:, stage, :9].view(n, 3, 3), mb[:, stage, 9:].view(n, 3, 3)
        x = blend(x, mt, bt)
    return x
