#!/usr/bin/env bash
# The GPU suite (issue 17): run it first whenever a GPU is available.
#
#   benchmarks/gpu_suite.sh                          # on a CUDA machine: everything
#   benchmarks/gpu_suite.sh --quick --results FILE   # on a CPU (CI): what runs without CUDA
#
# On CUDA: the `cuda`-marked tests; the step benchmark of every strategy under
# torch.cuda.set_sync_debug_mode("error") (benchmarks/step.py --sync-debug error); the OC-SVM
# benchmark with its GPU targets (fit of 256 points <= 2 ms, 65,536-key scoring <= 1 ms); the
# input-pipeline benchmark. Each benchmark appends its table + machine + device name to the
# results file (default benchmarks/RESULTS.md); this script adds a header with the device name
# and the test outcome. Without CUDA the cuda tests and --sync-debug are skipped (printed), and
# the benchmarks run on the CPU. A benchmark script or flag that this checkout lacks is skipped
# with a printed note. Exit status: 1 if any step that ran failed, else 0.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="${PWD}${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python}"
QUICK=()
RESULTS="benchmarks/RESULTS.md"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=(--quick); shift ;;
    --results) RESULTS="$2"; shift 2 ;;
    *) echo "usage: $0 [--quick] [--results PATH]" >&2; exit 2 ;;
  esac
done
DEVICE=$("$PY" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
NAME=$("$PY" -c "import torch, platform
print(torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or platform.machine())")
status=0
note() { echo "gpu_suite: $*"; }
has_flag() { "$PY" "$1" --help 2>/dev/null | grep -q -- "$2"; }

{ echo; echo "## GPU suite $(date -u +%Y-%m-%dT%H:%MZ) on ${DEVICE} (${NAME})"; } >> "$RESULTS"

if [ "$DEVICE" = cuda ]; then
  note "pytest -m cuda"
  if "$PY" -m pytest -q -m cuda tests; then outcome=passed; else outcome=FAILED; status=1; fi
  echo "- cuda-marked tests: ${outcome}" >> "$RESULTS"
else
  note "skip: cuda-marked tests (no CUDA device)"
  echo "- cuda-marked tests: skipped (no CUDA device)" >> "$RESULTS"
fi

bench() {  # bench SCRIPT [extra flags...]: run with the suite's common flags if the script exists
  local script="$1"; shift
  if [ ! -f "$script" ]; then
    note "skip: $script is not in this checkout"
    echo "- $script: skipped (not in this checkout)" >> "$RESULTS"
    return
  fi
  local flags=("$@")
  local common=(--device "$DEVICE" --results "$RESULTS" "${QUICK[@]}")
  for f in --device --results --quick; do
    if ! has_flag "$script" "$f"; then
      note "skip: $script has no $f flag (the benchmark convention); not run"
      echo "- $script: skipped (no $f flag)" >> "$RESULTS"
      return
    fi
  done
  note "$PY $script ${common[*]} ${flags[*]}"
  if ! "$PY" "$script" "${common[@]}" "${flags[@]}"; then status=1; echo "- $script: FAILED" >> "$RESULTS"; fi
}

STEP_FLAGS=()
if [ "$DEVICE" = cuda ]; then
  if has_flag benchmarks/step.py --sync-debug; then
    STEP_FLAGS=(--sync-debug error)
  else
    note "note: benchmarks/step.py has no --sync-debug flag yet: run without it"
  fi
else
  note "skip: --sync-debug error (CUDA only)"
fi
if [ "$DEVICE" = cuda ] && has_flag benchmarks/step.py --all-strategies; then STEP_FLAGS+=(--all-strategies); fi  # CPU smoke: none/mioc/mochi
bench benchmarks/step.py "${STEP_FLAGS[@]}"
bench benchmarks/ocsvm.py
bench benchmarks/input.py

exit $status
