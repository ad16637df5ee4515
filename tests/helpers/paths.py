"""Where things are: the repository root, the suite's folder and its helpers' folder (one place, so
that a test file's depth in ``tests/`` never decides what it reads).

The suite is the package ``tests`` (its helpers ``tests.helpers``), found through the repository
root on ``sys.path``; ``tests/`` itself is never put there: its folders are named like the packages
they test, and ``tests/pretrain/`` would be imported as ``pretrain``."""

from __future__ import annotations

from pathlib import Path

HELPERS = Path(__file__).resolve().parent
TESTS = HELPERS.parent
ROOT = TESTS.parent
