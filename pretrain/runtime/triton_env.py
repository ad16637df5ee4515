"""Whether Triton runs its interpreter, read in one place without importing triton.

A leaf module: the split BN layer (``model/split_bn.py``), its Triton kernels
(``model/split_bn_triton.py``) and the trainer's setup check (``engine/setup.py``) all ask it, so
the kernels need not import the layer that imports them.
"""

from __future__ import annotations

import os


def triton_interpreted() -> bool:
    """Whether Triton runs its interpreter (CPU tensors): TRITON_INTERPRET=1 at its import."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"
