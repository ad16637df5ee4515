"""The step contract that a negative strategy and a loss both declare on their class, declared once
here: ``negatives.base.NegativeStrategy`` and ``pretrain.losses.Loss`` mix :class:`Contract` in,
and :data:`FLAGS` is the one table of every class flag a strategy or a loss declares (its type,
what it holds, and the config rules' list of the names that set it), which the declaration check
(:func:`check_declarations`), the generated docs (``pretrain.testing.contract_docs``), the config
rules (``pretrain.config.rules.registry_names``) and the kappa wrapper
(``pretrain.losses.base.DECLARED``) read. Imports only the standard library.

The test suite measures it for every registered strategy and loss (plugins included), the
CUDA-graph refusal (``pretrain.engine.cuda_graphs``) and the generated docs
(``scripts/gen_config_docs.py``, ``scripts/gen_step_counts.py``) read it. The defaults are the safe
ones: no host sync allowed, not captured in a CUDA graph.

    @register("mine")
    class Mine(NegativeStrategy):   # or Loss
        capturable = True
        contract_kwargs = {"num_mix": 4}
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, ClassVar

from negmine_core.contract.messages import fail, kind_of


class Contract:
    """The class attributes of the step contract (docs/plugins.md shows what measures each)."""

    #: Which kind of class this is, ``"strategy"`` or ``"loss"``: set by the two base classes,
    #: read by the contract's messages.
    kind: ClassVar[str] = ""
    #: The registry that holds classes of this kind (``negatives.strategies``,
    #: ``pretrain.losses.registry``): set by the two base classes.
    registry: ClassVar[Any] = None

    #: Host-device syncs per training step (a ``.item()``, a boolean mask's size, a host branch
    #: on a device value): the sync test counts them and fails when the count differs.
    syncs_per_step: ClassVar[int] = 0
    #: Where the syncs come from (docs/step_counts.md shows it).
    syncs_why: ClassVar[str] = ""
    #: True once the step with this strategy or loss is known to be capturable in a CUDA graph
    #: (``train.cuda_graphs``); False refuses the key with ``why_not_capturable``.
    capturable: ClassVar[bool] = False
    #: Why not ``capturable``: the sentence ``train.cuda_graphs``'s refusal quotes.
    why_not_capturable: ClassVar[str] = "it does not declare capturable = True"
    #: True once a GPU run compared the captured step with this class against the eager step
    #: (``benchmarks/graphs_check.py``, in MoCo's own layout: neither ``loss.symmetric`` nor
    #: ``moco.symmetric_keys``): ``train.cuda_graphs: auto`` captures a step whose loss and
    #: strategy both declare it and runs any other step eager, saying why (``on`` captures any
    #: capturable step). Read from the class's own body, not inherited: a subclass is another
    #: step, verified only if it declares it again. Needs ``capturable = True``.
    capture_verified: ClassVar[bool] = False
    #: Python state that changes between steps (a counter, a schedule read as a float), which a
    #: CUDA graph would freeze: what it is, or empty. Non-empty refuses ``train.cuda_graphs``.
    step_state: ClassVar[str] = ""
    #: ``negatives.kwargs`` / ``loss.kwargs`` of the contract's tiny runs, warm-ups off: the
    #: training steps of the sync and op counts (``digits_moco.yaml``, a 64-key queue, a batch of
    #: 16) and the kit's tensors (a strategy's: a 32-key queue, a batch of 8, width 16; a loss's:
    #: a 64-key queue, 16 queries); a strategy's are the smallest sizes that make it add negatives.
    contract_kwargs: ClassVar[dict[str, Any]] = {}
    #: What the class may add to plain MoCo's aten ops per training step, as a fraction of that
    #: step (1.2: +120 %); None: the default +15 %. The contract kit (``pretrain.testing``) and
    #: negmine's op test count a real step and fail above it, naming the class and this attribute;
    #: negmine's built-ins are pinned exactly instead (``pretrain.testing.pins``). The kit counts
    #: at batches 16 and 32: ops that grow with the batch (a loop over rows) are held to this
    #: fraction at batch 512 and fail, advised to vectorise, as no fixed fraction covers them.
    ops_budget: ClassVar[float | None] = None


@dataclass(frozen=True)
class Flag:
    """One class flag of the contract: the attribute, the kind that declares it (``""``: both),
    the types it may have and what it holds (the declaration check's message), and, where the
    config rules list the registered names that set it, the list's name and the value that puts
    a name in it (``names("batch_losses")`` in ``pretrain/config/rules.py``)."""

    attribute: str
    kind: str
    types: tuple[type, ...]
    holds: str
    names: str = ""
    when: object = True


_BOOL = ((bool,), "True or False")
#: Every class flag a strategy or a loss declares: the one table its consumers read. A new flag
#: is its attribute on the base class (with its ``#:`` comment) and one row here.
FLAGS: tuple[Flag, ...] = (
    Flag("syncs_why", "", (str,), "a sentence"),
    Flag("why_not_capturable", "", (str,), "a sentence"),
    Flag("step_state", "", (str,), "a sentence, or empty"),
    Flag("capturable", "", *_BOOL),
    Flag("capture_verified", "", *_BOOL),
    Flag("contract_kwargs", "", (dict,), "a dict of constructor keyword arguments"),
    Flag(
        "ops_budget",
        "",
        (float, int, type(None)),
        "None (the default +15 %) or a fraction such as 1.2",
    ),
    Flag(
        "zero_kwargs",
        "strategy",
        (dict, type(None)),
        "None or a dict of constructor keyword arguments",
    ),
    Flag("symmetric_ok", "strategy", *_BOOL, names="per_query_strategies", when=False),
    Flag("needs_global_batch", "strategy", *_BOOL),
    Flag("replaces_queue", "strategy", *_BOOL, names="queue_replacing"),
    Flag("ddp_check", "strategy", *_BOOL),
    Flag(
        "accepts_strategies",
        "loss",
        (tuple, type(None)),
        "None (any) or a tuple of strategy names",
    ),
    Flag("why_strategies", "loss", (str,), "a sentence"),
    Flag("batch_layout", "loss", *_BOOL, names="batch_losses"),
    Flag("can_drop_queue", "loss", *_BOOL, names="queue_optional"),
    Flag("needs_labels", "loss", *_BOOL, names="label_losses"),
    Flag("extra_views", "loss", (int,), "a whole number >= 0", names="support_losses"),
    Flag(
        "from_run",
        "loss",
        (tuple,),
        "a tuple of run settings (temperature, num_classes, dim, ...)",
    ),
)


def flags(kind: str) -> tuple[Flag, ...]:
    """The flags a class of ``kind`` (``"strategy"``, ``"loss"``) declares: both kinds' and its
    own."""
    return tuple(f for f in FLAGS if f.kind in ("", kind))


def capture_verified(cls: type) -> bool:
    """Whether ``cls`` itself declares ``capture_verified = True``: an inherited declaration does
    not count, since a GPU run verified the step of the class that declares it, not a subclass's."""
    return vars(cls).get("capture_verified", False) is True


def accepted(cls: type, kwargs: dict[str, Any], given: tuple[str, ...] = ()) -> str:
    """Why ``cls(**kwargs)`` is refused by its signature (an unknown argument, or a required one
    missing other than ``given``), or ''."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return ""
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return ""
    for key in kwargs:
        if key not in params:
            return f"the constructor has no argument {key!r} (it takes {', '.join(params)})"
    for name, p in params.items():
        required = p.default is inspect.Parameter.empty and p.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )
        if required and name not in kwargs and name not in given:
            return f"the constructor's argument {name!r} has no default and is not given"
    return ""


def check_declarations(cls: type) -> None:
    """ContractError naming the attribute when one of ``cls``'s declarations (`FLAGS`)
    has the wrong type, or names a setting its constructor refuses."""
    kind = kind_of(cls)
    n = cls.syncs_per_step
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise fail(cls, "syncs_per_step", f"is {n!r}", "declare a whole number >= 0")
    if n and not cls.syncs_why:
        raise fail(cls, "syncs_why", f"is empty while syncs_per_step = {n}", "say where they are")
    for flag in flags(kind):
        value = getattr(cls, flag.attribute)
        bad_bool = bool not in flag.types and isinstance(value, bool)
        if not isinstance(value, flag.types) or bad_bool:
            raise fail(cls, flag.attribute, f"is {value!r}", f"declare {flag.holds}")
    if cls.capture_verified and not cls.capturable:
        raise fail(
            cls,
            "capture_verified",
            "is True while capturable = False",
            "a step verified under CUDA-graph capture is capturable: declare capturable = True, "
            "or capture_verified = False",
        )
    budget = cls.ops_budget
    if budget is not None and budget < 0:
        raise fail(cls, "ops_budget", f"is {budget!r}", "declare a fraction >= 0 (or None)")
    given = tuple(getattr(cls, "from_run", ()))  # a loss's temperature comes from the run
    settings = ["contract_kwargs"] + (["zero_kwargs"] if kind == "strategy" else [])
    for attribute in settings:
        why = accepted(cls, getattr(cls, attribute) or {}, given)
        if why:
            raise fail(cls, attribute, why, "name the constructor's keyword arguments")
