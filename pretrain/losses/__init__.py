"""The losses: pure functions on tensors, and the registered modules the trainer calls; imports
only pretrain.runtime and negatives below it (never data, model, engine or config).

    step = losses.Step.single(q, k, queue=queue)
    loss = losses.create("supcon", temperature=0.1)(step)      # any ``loss.name``

- ``base``: the registry of ``loss.name`` (``create``, ``list_losses``, ``register``), the base
  class ``Loss`` (the step record, ``Step``, is negmine_core.step's, shared with the strategies).
- one file per registered loss, with its paper and a usage example: ``infonce``,
  ``nt_xent_loss``, ``supcon_loss``, ``sincere_loss``, ``firm_loss`` (on ``queue_layout``'s
  ``QueueContrastive``), ``debiased``, ``hard``, ``decoupled`` (on ``negative_weighting``),
  ``ring``, ``imix``, ``fnc``, ``cider``; ``kappa`` holds the kappa head's terms (``WithKappa``).
- pure functions: ``queue_layout`` (MoCo's layout), ``reweighted``, ``masked``.

A new loss is one file and its name in the import line below.
"""

from negmine_core.step import SetupContext
from pretrain.losses import (  # noqa: F401  (registers the losses)
    cider,
    debiased,
    decoupled,
    firm_loss,
    fnc,
    hard,
    imix,
    infonce,
    nt_xent_loss,
    ring,
    sincere_loss,
    supcon_loss,
)
from pretrain.losses.base import (
    Loss,
    Step,
    create,
    list_losses,
    register,
    registry,
)
from pretrain.losses.cider import (
    Cider,
    cider,  # noqa: E402, F811  (the function, not the module)
    cider_terms,
    sequential_ema,
)
from pretrain.losses.infonce import InfoNCE, info_nce, moco_logits
from pretrain.losses.kappa import WithKappa, kappa_alignment, kappa_terms
from pretrain.losses.masked import check_temperature
from pretrain.losses.queue_layout import QueueContrastive

__all__ = [
    "Cider",
    "InfoNCE",
    "Loss",
    "QueueContrastive",
    "SetupContext",
    "Step",
    "WithKappa",
    "create",
    "list_losses",
    "register",
    "registry",
    "check_temperature",
    "cider",
    "cider_terms",
    "info_nce",
    "kappa_alignment",
    "kappa_terms",
    "moco_logits",
    "sequential_ema",
]
