"""The sync counter of the contract kit (``pretrain/testing/sync_counter.py``, installed with
negmine), under the name negmine's tests and benchmarks import it by."""

from pretrain.testing.sync_counter import *  # noqa: F403
from pretrain.testing.sync_counter import (  # noqa: F401  (the names the tests use)
    ALWAYS,
    INDEX_PUT,
    Sync,
    SyncCounter,
    classify,
    gpu_host_scalar,
)
