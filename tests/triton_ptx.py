"""Compile Triton kernels for a GPU here, without one (not a test file).

    ptx = compiled_ptx(SCRIPT)  # what SCRIPT writes: PTX from triton.compile(..., GPUTarget(...))

The script runs in a fresh process without TRITON_INTERPRET: a test session may have imported
triton in interpreter mode, where ``triton.compile`` is not what CUDA runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def compiled_ptx(script: str) -> str:
    """What ``script`` writes to stdout, run from the repository root with the interpreter off."""
    pytest.importorskip("triton", reason="triton comes with torch's CUDA wheels; not installed")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout
