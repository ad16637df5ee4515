"""The CUDA-graph refusal (``train.cuda_graphs``) as the class declares it: a class that syncs,
keeps Python state per step or is not declared capturable is refused by the trainer's own
``pretrain.engine.cuda_graphs.declared`` (what ``refusal`` lists), naming it and the attribute;
a class declared capturable must be sync-free (a graph cannot read the device)."""

from __future__ import annotations

from negmine_core.contract.messages import fail, kind_of
from pretrain.testing import steps


def check_cuda_graph_refusal(cls: type) -> str | None:
    """ContractError naming the attribute when ``cls`` declares ``capturable = True`` with host
    syncs, or when the trainer's refusal of a config using it does not
    follow its declarations. Returns the refusal (None: accepted)."""
    from pretrain.engine.cuda_graphs import declared

    if cls.capturable and cls.syncs_per_step:
        raise fail(
            cls,
            "capturable",
            f"is True while syncs_per_step = {cls.syncs_per_step}",
            "a CUDA graph cannot read the device: declare capturable = False "
            "(and why_not_capturable), or remove the syncs",
        )
    kind = kind_of(cls)
    with steps.registered(cls) as name:
        refused = [why for ok, why in declared(kind, name, cls) if not ok]
    clean = cls.capturable and not cls.syncs_per_step and not cls.step_state
    if clean and refused:
        raise fail(
            cls,
            "capturable",
            f"is True but train.cuda_graphs is refused: {refused[0]}",
            "meet the other declaration it names",
        )
    if not clean and not refused:
        raise fail(
            cls,
            "capturable",
            "train.cuda_graphs is not refused for this class",
            "negmine's pretrain.engine.cuda_graphs.declared must read syncs_per_step, "
            "step_state and capturable",
        )
    return refused[0] if refused else None
