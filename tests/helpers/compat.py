"""What the oldest Python the project allows (3.10) lacks: ``tomllib`` (3.11) is ``tomli`` there,
which pytest itself requires on Python < 3.11."""

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["tomllib"]
