#!/usr/bin/env bash
# The GPU suite: run it first whenever a GPU is available (docs/gpu_suite.md).
#
#   benchmarks/gpu_suite.sh                          # on a CUDA machine: every part, <= 8 min
#   benchmarks/gpu_suite.sh --quick --results FILE   # on a CPU (CI): what runs without CUDA
#   benchmarks/gpu_suite.sh --parts sync,step --budget step=300   # some parts, another budget
#
# Parts, in order of value, each under its own time budget (`timeout`, seconds):
#   sync   (100) benchmarks/step.py --mode all --sync-debug error --steps 3: every strategy, every
#                negative baseline, the digits and cifar10_moco steps (bf16 channels_last) under
#                torch.cuda.set_sync_debug_mode("error") (CUDA only)
#   step   (120) benchmarks/step.py --mode all: the same steps timed (20 each), sync debug off; on
#                a CPU the strategies table (--quick)
#   splitbn (30) benchmarks/split_bn.py: one split-BN layer on each path (per_split, fused aten,
#                triton): decides the CUDA default (--quick sizes on a CPU)
#   ocsvm  (60)  benchmarks/ocsvm.py --quick: the OC-SVM fit and scoring, GPU targets
#   input  (50)  benchmarks/input.py: the input pipeline (--quick on a CPU)
#   tests  (90)  pytest -m cuda: the cuda-marked tests (CUDA only)
# 450 s of budgets in all. Each benchmark appends its table to the results file (default
# benchmarks/RESULTS.md) when it ends, and this script appends a line per part as soon as the part
# ends (passed / FAILED / timed out, with its seconds), so a run cut short keeps every table it
# measured. A part that runs past its budget is killed (SIGTERM, then SIGKILL 10 s later) and the
# next part starts. Without CUDA the CUDA-only parts are skipped (printed) and the benchmarks run
# on the CPU. A benchmark script or flag that this checkout lacks is skipped with a printed note.
# Exit status: 1 if any part that ran failed or timed out, 2 on bad usage (or no device), else 0.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="${PWD}${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python}"
QUICK=()
RESULTS="benchmarks/RESULTS.md"
PARTS="sync,step,splitbn,ocsvm,input,tests"
declare -A BUDGET=([sync]=100 [step]=120 [splitbn]=30 [ocsvm]=60 [input]=50 [tests]=90)
usage() { echo "usage: $0 [--quick] [--results PATH] [--parts LIST] [--budget PART=SECONDS]..." >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=(--quick); shift ;;
    --results) [ $# -ge 2 ] || usage; RESULTS="$2"; shift 2 ;;
    --parts) [ $# -ge 2 ] || usage; PARTS="$2"; shift 2 ;;
    --budget)
      [ $# -ge 2 ] || usage
      name="${2%%=*}"; secs="${2#*=}"
      if [ -z "${BUDGET[$name]+x}" ] || ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
        echo "gpu_suite: --budget $2: want PART=SECONDS, PART one of ${!BUDGET[*]}" >&2; exit 2
      fi
      BUDGET[$name]="$secs"; shift 2 ;;
    *) usage ;;
  esac
done
IFS=, read -r -a SELECTED <<< "$PARTS"
for part in "${SELECTED[@]}"; do
  if [ -z "${BUDGET[$part]+x}" ]; then
    echo "gpu_suite: --parts: unknown part '$part' (parts: sync,step,splitbn,ocsvm,input,tests)" >&2; exit 2
  fi
done
{ read -r DEVICE; read -r NAME; } < <("$PY" -c "import platform, torch
from pretrain import dist
cuda = dist.device_type() == 'cuda'  # CUDA if visible, unless NEGMINE_DEVICE=cpu
print('cuda' if cuda else 'cpu')
print(torch.cuda.get_device_name() if cuda else platform.processor() or platform.machine())")
if [ -z "${DEVICE:-}" ]; then echo "gpu_suite: no device from $PY (the error above)" >&2; exit 2; fi
status=0
note() { echo "gpu_suite: $*"; }
record() { echo "- $*" >> "$RESULTS"; }
START=$SECONDS

{ echo; echo "## GPU suite $(date -u +%Y-%m-%dT%H:%MZ) on ${DEVICE} (${NAME}), parts ${PARTS}"; } >> "$RESULTS"

run_part() {  # run_part NAME CMD...: CMD under the part's budget; one line on stdout and in RESULTS
  local name="$1"; shift
  local budget="${BUDGET[$name]}" tic=$SECONDS rc outcome
  note "part $name (budget ${budget} s): $*"
  timeout -k 10 "$budget" "$@"
  rc=$?
  case $rc in
    0) outcome=passed ;;
    124|137) outcome="timed out (budget ${budget} s)"; status=1 ;;
    *) outcome="FAILED (exit $rc)"; status=1 ;;
  esac
  note "part $name: ${outcome} in $((SECONDS - tic)) s"
  record "$name: ${outcome} in $((SECONDS - tic)) s"
}

skip_part() { note "skip: $2"; record "$1: skipped ($2)"; }

bench_part() {  # bench_part NAME SCRIPT [flags...]: with the common flags, if script and flags exist
  local name="$1" script="$2"; shift 2
  if [ ! -f "$script" ]; then skip_part "$name" "$script is not in this checkout"; return; fi
  local help f
  help=$("$PY" "$script" --help 2>/dev/null)
  for f in --device --results --quick "$@"; do
    case "$f" in --*) ;; *) continue ;; esac
    if ! grep -q -- "$f" <<< "$help"; then skip_part "$name" "$script has no $f flag"; return; fi
  done
  run_part "$name" "$PY" "$script" --device "$DEVICE" --results "$RESULTS" "${QUICK[@]}" "$@"
}

part_sync() {
  if [ "$DEVICE" != cuda ]; then skip_part sync "--sync-debug error (CUDA only)"; return; fi
  bench_part sync benchmarks/step.py --mode all --sync-debug error --steps 3 \
    --settings "bf16 channels_last"
}

part_step() {
  if [ "$DEVICE" = cuda ]; then
    bench_part step benchmarks/step.py --mode all --settings "bf16 channels_last"
  else
    bench_part step benchmarks/step.py  # the strategies table, --quick sizes
  fi
}

part_splitbn() { bench_part splitbn benchmarks/split_bn.py; }

part_ocsvm() {  # --quick on CUDA too: n = 256 and 1024 (the full run passed 170 s on an H100)
  if [ ${#QUICK[@]} -eq 0 ]; then bench_part ocsvm benchmarks/ocsvm.py --quick
  else bench_part ocsvm benchmarks/ocsvm.py; fi
}

part_input() { bench_part input benchmarks/input.py; }

part_tests() {
  if [ "$DEVICE" != cuda ]; then skip_part tests "cuda-marked tests (no CUDA device)"; return; fi
  run_part tests "$PY" -m pytest -q -m cuda tests
}

for part in "${SELECTED[@]}"; do "part_$part"; done
note "done in $((SECONDS - START)) s, exit status ${status}"
record "suite: $((SECONDS - START)) s in all, exit status ${status}"
exit $status
