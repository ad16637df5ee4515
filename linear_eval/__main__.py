"""``python -m linear_eval``: the command line lives in :mod:`linear_eval.cli.main`."""

import sys

from linear_eval.cli.main import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
