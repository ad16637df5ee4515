"""The step contract of a negative strategy and a loss, in one home: what a class declares
(`declarations`: [`Contract`][negmine_core.contract.Contract], the flag table `FLAGS`, the
declaration check), how a failure is named (`messages`), the checks of a hook's output (`checks`),
the trainer's per-step watch of them (`watch`), and the measurements of a step (host syncs:
`sync_counter`; aten ops: `op_counter`). The trainer (``pretrain.engine``) and the
contract kit (``pretrain.testing``) both import it; it imports only torch and ``negmine_core``.
"""

from negmine_core.contract.declarations import FLAGS, Contract, Flag, check_declarations, flags
from negmine_core.contract.messages import ContractError

__all__ = ["FLAGS", "Contract", "ContractError", "Flag", "check_declarations", "flags"]
