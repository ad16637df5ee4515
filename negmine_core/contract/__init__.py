"""The step contract of a negative strategy and a loss, in one home: what a class declares
(:mod:`.declarations`: :class:`Contract`, the flag table :data:`FLAGS`, the declaration check),
how a failure is named (:mod:`.messages`), the checks of a hook's output (:mod:`.checks`), the
trainer's per-step watch of them (:mod:`.watch`), and the measurements of a step (host syncs:
:mod:`.sync_counter`; aten ops: :mod:`.op_counter`). The trainer (``pretrain.engine``) and the
contract kit (``pretrain.testing``) both import it; it imports only torch and ``negmine_core``.
"""

from negmine_core.contract.declarations import FLAGS, Contract, Flag, check_declarations, flags
from negmine_core.contract.messages import ContractError

__all__ = ["FLAGS", "Contract", "ContractError", "Flag", "check_declarations", "flags"]
