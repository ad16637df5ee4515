"""Print pip constraints that pin every lower bound declared in pyproject.toml to itself.

    python .ci/floors.py > floors.txt && pip install -c floors.txt -e ".[dev,docs]"
    python .ci/floors.py --python     # requires-python's floor, e.g. 3.10

The pins are for requires-python's floor: a requirement whose marker excludes it is left out.

installs the oldest versions the project says it supports (``name>=X`` becomes ``name==X``), so that
CI tests the floors it declares instead of trusting them. Run it with a Python that has ``tomllib``
(3.11+) or ``tomli``, and ``packaging`` (any environment with pip's test tools: CI's first one).
A requirement without a ``>=`` bound is refused: every dependency must declare its floor.
"""

from __future__ import annotations

import sys
from pathlib import Path

from packaging.requirements import Requirement

try:
    import tomllib
except ModuleNotFoundError:
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def floors(project: dict, python: str | None = None) -> dict[str, str]:
    """Each requirement of ``dependencies`` and the optional extras -> its ``>=`` bound; with a
    ``python`` (X.Y), only the requirements whose environment marker holds there."""
    found = {}
    for text in [*project["dependencies"], *sum(project["optional-dependencies"].values(), [])]:
        req = Requirement(text)
        env = {"python_version": python, "python_full_version": f"{python}.0"} if python else None
        if req.marker is not None and env and not req.marker.evaluate(env):
            continue
        lower = [s.version for s in req.specifier if s.operator == ">="]
        if len(lower) != 1:
            raise SystemExit(f"{PYPROJECT}: {text!r} declares no single >= floor")
        found[req.name.lower()] = lower[0]
    return found


def python_floor(project: dict) -> str:
    (lower,) = [s.version for s in Requirement(f"python{project['requires-python']}").specifier
                if s.operator == ">="]  # fmt: skip
    return lower


if __name__ == "__main__":
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    if sys.argv[1:] == ["--python"]:
        print(python_floor(project))
    else:
        pins = floors(project, python_floor(project))  # for the oldest Python: its markers
        print("\n".join(f"{name}=={version}" for name, version in sorted(pins.items())))
