"""The op counter of the contract kit (``pretrain/testing/op_counter.py``, installed with
negmine), under the name negmine's tests import it by."""

from pretrain.testing.op_counter import *  # noqa: F403
from pretrain.testing.op_counter import METADATA, OpCounter, launches, site  # noqa: F401
