"""The losses: pure functions on tensors, and the registered modules the trainer calls; imports
only pretrain.runtime and negatives below it (never data, model, engine or config).

    step = losses.StepTensors.single(q, k, queue=queue)
    loss = losses.create("supcon", temperature=0.1)(step)      # any ``loss.name``

- ``modules``: the registry of ``loss.name`` (``create``, ``list_losses``, ``register``), the
  base class ``Loss``, ``StepTensors`` and one module per loss, in MoCo's layout.

- ``infonce``: MoCo's logits and InfoNCE.
- ``multiview``: NT-Xent, SupCon, SINCERE and FIRM on a ``[view1; view2]`` batch.
- ``queue_layout``: the same losses with query anchors against keys + queue.
- ``cider``: CIDER's dispersion + compactness with the sequential prototype EMA.
- ``kappa``: the vMF κ alignment and regulariser.
"""

from pretrain.losses import fnc, imix, negative_weighting, ring  # noqa: E402, F401  (register)
from pretrain.losses.cider import cider, cider_terms, sequential_ema
from pretrain.losses.infonce import info_nce, moco_logits
from pretrain.losses.kappa import kappa_alignment, kappa_terms
from pretrain.losses.masked import check_temperature
from pretrain.losses.modules import (
    Cider,
    InfoNCE,
    Loss,
    QueueContrastive,
    StepTensors,
    WithKappa,
    create,
    list_losses,
    register,
    registry,
)
from pretrain.losses.multiview import FIRM_LAYOUTS, firm, nt_xent, sincere, supcon
from pretrain.losses.queue_layout import (
    QUEUE_KINDS,
    contrast_top1,
    queue_contrastive,
    queue_positives,
)

__all__ = [
    "FIRM_LAYOUTS",
    "Cider",
    "InfoNCE",
    "Loss",
    "QueueContrastive",
    "StepTensors",
    "WithKappa",
    "create",
    "list_losses",
    "register",
    "registry",
    "QUEUE_KINDS",
    "check_temperature",
    "cider",
    "cider_terms",
    "firm",
    "info_nce",
    "kappa_alignment",
    "kappa_terms",
    "moco_logits",
    "nt_xent",
    "contrast_top1",
    "queue_contrastive",
    "queue_positives",
    "sequential_ema",
    "sincere",
    "supcon",
]
