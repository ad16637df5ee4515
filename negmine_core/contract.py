"""The step contract that a negative strategy and a loss both declare on their class, declared once
here: ``negatives.base.NegativeStrategy`` and ``pretrain.losses.Loss`` mix it in. A leaf module
(imports only the standard library) of the leaf package, beside the registry
(``negmine_core.registry``).

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

from typing import Any, ClassVar


class Contract:
    """The class attributes of the step contract (docs/plugins.md shows what measures each)."""

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
