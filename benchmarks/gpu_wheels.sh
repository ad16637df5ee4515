#!/usr/bin/env bash
# The wheels the GPU suite's `peers` part needs beyond a GPU image's PyTorch stack (lightly and its
# hydra-core/omegaconf/antlr4, thundersvm-cpu), for Python 3.12 on x86-64, into DEST (default
# .gpu/whl, which .gpu/setup.sh installs into /tmp/site on the GPU machine). Run where pip reaches a
# package index:
#
#   bash benchmarks/gpu_wheels.sh [DEST]
#
# antlr4-python3-runtime 4.9.3 (hydra-core's pin) is published as an sdist only: it is built here.
set -euo pipefail
dest=${1:-.gpu/whl}
mkdir -p "$dest"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dest" lightly==1.6.0 hydra-core==1.3.8 omegaconf==2.3.1 thundersvm-cpu==0.3.3
python3 -m pip wheel -q --no-deps -w "$dest" antlr4-python3-runtime==4.9.3
ls "$dest"
