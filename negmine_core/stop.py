"""A stop request for the whole process: the trainer's stop signals (SIGTERM, SIGUSR2, SIGINT)
set it, and a loop that can run long inside one training step (MiOC's OC-SVM solver) polls it
with :func:`requested`, cuts its work short and lets the step end, so the trainer checkpoints at
that step as for any preemption."""

from __future__ import annotations

_requested = False


def request() -> None:
    """Ask every long loop of this process to stop (the trainer's signal handler)."""
    global _requested
    _requested = True


def clear() -> None:
    """Forget the request (the trainer, when it starts and when it stops watching signals)."""
    global _requested
    _requested = False


def requested() -> bool:
    """Whether a stop was requested since the trainer last cleared it."""
    return _requested
