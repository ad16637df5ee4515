"""When the host and device SMO loops stop before the stopping rule: the iteration cap, a wall-clock
cap, and a stop request (a preemption's SIGTERM) polled inside a long solve; one warning per
reason and :class:`~negatives.ocsvm.svm.OneClassSVM`.

The loops call :meth:`Limits.reached` between their chunks of iterations (the host loop: up to
1,000 iterations, the device loop: ``chunk_size``), so polling adds no host sync. The stop request
is read only once a solve has run ``poll_after_s`` (1 s): a usual fit takes milliseconds, and a
stop signal that arrives during one lets it finish, so the step and its checkpoint equal the
uninterrupted run's. The Triton loop is one program and is not polled.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Limits:
    """The caps of one solve: ``max_iter`` iterations, ``max_seconds`` of wall clock (None: no
    cap) and ``should_stop``, a stop request polled after ``poll_after_s``."""

    max_iter: int
    max_seconds: float | None = None
    should_stop: Callable[[], bool] | None = None
    poll_after_s: float = 1.0
    start: float = field(default_factory=lambda: time.perf_counter())

    def reached(self, it: int) -> str:
        """Why the solve stops after ``it`` iterations ("max_iter", "max_seconds", "stop"), or
        "" to go on."""
        if it >= self.max_iter:
            return "max_iter"
        if self.max_seconds is None and self.should_stop is None:
            return ""
        elapsed = time.perf_counter() - self.start
        if self.max_seconds is not None and elapsed >= self.max_seconds:
            return "max_seconds"
        if self.should_stop is not None and elapsed >= self.poll_after_s and self.should_stop():
            return "stop"
        return ""


def message(why: str, n_iter: int, max_seconds: float | None) -> str:
    """The warning of a solve that stopped for ``why`` after ``n_iter`` iterations."""
    if why == "max_seconds":
        return (
            f"OneClassSVM stopped after max_seconds={max_seconds:g} s at iteration {n_iter}, "
            "before the solver's stopping rule: the fit is the solver's state then (warned once)"
        )
    if why == "stop":
        return (
            f"OneClassSVM stopped at iteration {n_iter}: a stop was requested (SIGTERM, SIGUSR2 "
            "or Ctrl-C) during a long solve; the fit is the solver's state then (warned once)"
        )
    return f"OneClassSVM stopped at max_iter={n_iter}"


def warn_once(owner: object, why: str, n_iter: int, max_seconds: float | None, level: int) -> None:
    """One RuntimeWarning per reason and ``owner`` (a refit every training step warns once)."""
    warned = owner.__dict__.setdefault("_warned", set())
    if why and why not in warned:
        warned.add(why)
        warnings.warn(message(why, n_iter, max_seconds), RuntimeWarning, stacklevel=level + 1)
