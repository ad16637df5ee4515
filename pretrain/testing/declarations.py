"""The declaration check of the kit: the contract's own
(:func:`negmine_core.contract.check_declarations`: every flag of
:data:`negmine_core.contract.FLAGS` of its type, the contract's settings accepted by the
constructor), and for a loss, its ``from_run`` against the run settings the trainer fills in
(fast, before anything runs)."""

from __future__ import annotations

from negmine_core.contract import declarations
from negmine_core.contract.messages import fail, kind_of


def check_declarations(cls: type) -> None:
    """ContractError naming the attribute when one of ``cls``'s declarations has the wrong type
    or a setting its constructor refuses, or a loss's ``from_run`` names no run setting."""
    if kind_of(cls) == "loss":
        check_run_settings(cls)
    declarations.check_declarations(cls)


def check_run_settings(cls: type) -> None:
    """ContractError unless every name of a loss's ``from_run`` is a run setting the trainer
    fills in (``pretrain.config.run_settings.KEYS``)."""
    from pretrain.config import run_settings

    from_run = cls.from_run
    if not isinstance(from_run, tuple):
        return  # the flag's own type check names it
    unknown = [n for n in from_run if n not in run_settings.KEYS]
    if unknown:
        raise fail(
            cls,
            "from_run",
            f"names {', '.join(unknown)}, which the trainer does not fill in",
            f"name run settings among {', '.join(run_settings.KEYS)}",
        )
