#!/usr/bin/env bash
# The worked plugin example's own tests, as a plugin author's CI runs them: negmine built as a wheel
# and installed (not editable, without negmine's tests/) in a fresh venv with the example, then the
# example's tests, which run negmine's contract kit (pretrain.testing). From the repository root:
#     bash examples/plugin/check_from_wheel.sh [VENV]      # VENV: default a temporary folder
# ~2-6 min (torch's install from the pip cache dominates), then ~20 s of tests on a CPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d) # the wheel, the default venv (several GB with torch) and the test folder
trap 'rm -rf "$work"' EXIT
venv=${1:-$work/venv}
dist=$work/dist
python3 -m pip wheel --quiet --no-deps "$root" -w "$dist"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet "$dist"/negmine-*.whl "$root/examples/plugin" pytest
rm -rf "$root/build" "$root/examples/plugin/build"
# outside the checkout and without PYTHONPATH: negmine comes from the wheel only
# -c: the example's own pyproject.toml is the config (negmine's addopts name pytest-xdist)
mkdir "$work/run" && cd "$work/run" && env -u PYTHONPATH "$venv/bin/python" -m pytest -p no:cacheprovider -q \
    -c "$root/examples/plugin/pyproject.toml" --rootdir "$root/examples/plugin" \
    "$root/examples/plugin/tests"
