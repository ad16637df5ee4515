"""Where things are: the repository root, the suite's folder and its helpers' folder (one place, so
that a test file's depth in ``tests/`` never decides what it reads)."""

from __future__ import annotations

from pathlib import Path

HELPERS = Path(__file__).resolve().parent
TESTS = HELPERS.parent
ROOT = TESTS.parent
