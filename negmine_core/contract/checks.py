"""The checks of a strategy's returned record (:class:`~negmine_core.step.ExtraNegatives`) and of
a loss's output: shape, dtype, device, finiteness, unit norm, detachment, each failure naming the
class and the hook. The contract kit runs them on tiny inputs; ``rows`` / ``because`` /
``fix_rows`` / ``dtypes`` let the trainer's per-step check (:mod:`negmine_core.contract.watch`)
run the same function on a real step's record."""

from __future__ import annotations

import math

import torch

from negmine_core.contract.messages import ContractError, fail, shape
from negmine_core.step import ExtraNegatives

HOOK = "negatives()"


UNIT_TOLERANCE = 1e-4  # how far from 1 a row's norm may be in float32/64
HALF_TOLERANCE = 1e-2  # in float16/bfloat16 (8 or 11 significant bits)


def tolerance(dtype: torch.dtype) -> float:
    """How far from 1 a row's norm may be: :data:`UNIT_TOLERANCE` (1e-4) in float32/64,
    :data:`HALF_TOLERANCE` (1e-2) in half precision."""
    return HALF_TOLERANCE if dtype in (torch.float16, torch.bfloat16) else UNIT_TOLERANCE


def check_extra(
    cls: type,
    extra: object,
    q: torch.Tensor,
    queue: torch.Tensor,
    *,
    rows: int | None = None,
    because: str = "",
    fix_rows: str = "",
    dtypes: tuple[torch.dtype, ...] = (),
    values: bool = True,
    when: str = "",
) -> None:
    """ContractError naming ``cls`` and its ``negatives()`` hook unless ``extra`` is an
    :class:`ExtraNegatives` whose ``shared`` is (M, D) and ``per_query`` (N, S, D) (N = ``rows``,
    default q's rows; D = q's width), of the queue's dtype (or one of ``dtypes``) and device,
    finite, unit norm and detached. ``because`` / ``fix_rows``: why N is what it is and what to
    declare otherwise (the trainer's symmetric layout: ``symmetric_ok = False``). ``values=False``:
    the form only (host metadata, no device read): the trainer reads the values later
    (:func:`deviation`). ``when``: the step, appended to what failed
    (`` at s.ctx.global_step 8``)."""
    if not isinstance(extra, ExtraNegatives):
        raise fail(
            cls,
            HOOK,
            f"returned {type(extra).__name__}{when}",
            "return negatives.ExtraNegatives(shared=..., per_query=...)",
        )
    n, d = q.shape[0] if rows is None else rows, q.shape[-1]
    for field, want, form in (
        ("shared", 2, f"(M, D) = (M, {d})"),
        ("per_query", 3, f"(N, S, D) = ({n}, S, {d})"),
    ):
        t = getattr(extra, field)
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise fail(
                cls,
                HOOK,
                f"returned {field} of type {type(t).__name__}{when}",
                "return a tensor or None",
            )
        bad = t.dim() != want or t.shape[-1] != d or (want == 3 and t.shape[0] != n)
        if bad:
            why = f" because {because}" if because and want == 3 and t.shape[0] != n else ""
            fix = fix_rows if why and fix_rows else f"return {field} as {form}, rows of q's width"
            raise fail(cls, HOOK, f"returned {field} {shape(t)}{when}; expected {form}{why}", fix)
        check_tensor(cls, field, t, queue, dtypes, values, when)


def check_tensor(
    cls: type,
    field: str,
    t: torch.Tensor,
    queue: torch.Tensor,
    dtypes: tuple[torch.dtype, ...] = (),
    values: bool = True,
    when: str = "",
) -> None:
    """One returned tensor of :func:`check_extra` past its shape: the queue's dtype (or one of
    ``dtypes``) and device, detached; with ``values``, finite and unit norm."""
    allowed = (queue.dtype, *dtypes)
    if t.dtype not in allowed:
        raise fail(
            cls,
            HOOK,
            f"returned {field} of dtype {t.dtype}{when}, the queue's is {queue.dtype}",
            "cast it: .to(s.queue.dtype)",
        )
    if t.device != queue.device:
        raise fail(
            cls,
            HOOK,
            f"returned {field} on {t.device}{when}, the queue is on {queue.device}",
            "make it on s.queue.device",
        )
    if t.requires_grad or t.grad_fn is not None:  # an nn.Parameter too (no grad_fn)
        raise fail(
            cls,
            HOOK,
            f"returned {field} that carries a gradient{when}",
            "detach it (or decorate the hook with @torch.no_grad())",
        )
    if t.numel() == 0 or not values:
        return
    fault = value_fault(cls, field, float(deviation(t)), tolerance(t.dtype), when)
    if fault is not None:
        raise fault


def deviation(t: torch.Tensor) -> torch.Tensor:
    """The largest ``|norm - 1|`` of ``t``'s rows, a float64 device scalar (no host read): NaN or
    inf exactly when ``t`` holds a NaN or an inf (the float64 norm of finite float32/16 rows is
    finite), so one number says both whether ``t`` is finite and how far from unit norm."""
    return (t.detach().double().norm(dim=-1) - 1).abs().amax()


def value_fault(
    cls: type, field: str, worst: float, tol: float, when: str = "", *, inputs: str = ""
) -> ContractError | None:
    """The error for a returned ``field`` whose :func:`deviation` is ``worst``: non-finite first
    (a NaN row among finite ones is non-finite, not "not unit norm"), then off unit norm by more
    than ``tol``; None when neither. ``when``: where, appended (`` at the first step``);
    ``inputs``: what the hook was given, said of a non-finite record."""
    if not math.isfinite(worst):
        return fail(
            cls,
            HOOK,
            f"returned non-finite {field} (NaN or inf){inputs}{when}",
            "keep them finite (normalise with an eps; guard divisions)",
        )
    if worst > tol:
        return fail(
            cls,
            HOOK,
            f"returned {field} whose rows are not unit norm{when} (off by {worst:.3g})",
            "normalise them: F.normalize(x, dim=-1)",
        )
    return None


def check_loss_output(cls: type, loss: object, *, hook: str = "forward()") -> None:
    """ContractError naming ``cls`` and ``forward()`` unless ``loss`` is a finite scalar tensor
    of a floating dtype."""
    if not isinstance(loss, torch.Tensor):
        raise fail(cls, hook, f"returned {type(loss).__name__}", "return a scalar tensor")
    if loss.dim() != 0:
        raise fail(cls, hook, f"returned shape {shape(loss)}", "reduce it to a scalar (.mean())")
    if not loss.is_floating_point():
        raise fail(cls, hook, f"returned dtype {loss.dtype}", "return a floating-point scalar")
    if not bool(torch.isfinite(loss)):
        raise fail(
            cls,
            hook,
            f"returned {float(loss)} on finite unit-norm inputs",
            "keep it finite (an eps in logs and divisions)",
        )


__all__ = [
    "ContractError",
    "check_extra",
    "check_loss_output",
    "deviation",
    "tolerance",
    "value_fault",
]
