#!/usr/bin/env bash
# shellcheck disable=SC2317  # (file-wide) the part_* functions are called by name, "part_$part"
# The GPU suite: run it first whenever a GPU is available (docs/gpu_suite.md).
#
#   benchmarks/gpu_suite.sh --report /tmp/gpu          # on a CUDA machine: every part, < 10 min
#   benchmarks/gpu_suite.sh --quick --report DIR       # on a CPU (CI): what runs without CUDA
#   benchmarks/gpu_suite.sh --parts sync,step --budget step=300   # some parts, another budget
#   benchmarks/gpu_suite.sh --dry-run --device cuda    # print the plan (commands, budgets) only
#
# Parts, in this order (the pass/fail checks first, then the timings), each under its own time
# budget in seconds (`timeout`: SIGTERM at the budget, SIGKILL 10 s later):
#   tests   (87) pytest -m cuda tests: the cuda-marked tests (CUDA only)
#   sync    (59) benchmarks/step.py --mode all --sync-debug error --steps 3: every strategy, every
#                negative baseline, the digits and cifar10_moco steps (bf16 channels_last) under
#                torch.cuda.set_sync_debug_mode("error") (CUDA only)
#   mioc    (20) the quick start, python -m pretrain --cfg digits_mioc.yaml, cut at 90 steps (24
#                past the OC-SVM's warm-up), every step logged to REPORT/mioc.metrics.jsonl; on a
#                CPU (--quick) 4 steps with the OC-SVM from step 0
#   graphs  (81) benchmarks/graphs_check.py: cifar10_moco, 20 steps eager and 20 with
#                train.cuda_graphs=on stopped at 10 and resumed, losses and the final model and
#                queue compared (CUDA only)
#   splitbn (19) benchmarks/split_bn.py: one split-BN layer on each path (per_split, fused aten,
#                triton, triton_onepass): decides the CUDA default (--quick sizes on a CPU)
#   ocsvm   (45) benchmarks/ocsvm.py --quick --generators clustered: the OC-SVM fit and scoring
#                on the clustered points, GPU targets; the fit split into the kernel matrix, the
#                solve and the 4096-key scoring (on a CPU both generators)
#   step    (33) benchmarks/step.py --mode all: the steps of `sync` timed (20 each), sync debug
#                off; on a CPU the strategies table (--quick)
#   input   (40) benchmarks/input.py --parts trainer decode --trainers cifar10_moco --steps 10:
#                cifar10_moco's trainer vs model-only step and the batched decode + crop
#                (--quick, every part and recipe, on a CPU)
#   profile (48) benchmarks/profile_step.py --capture both: the cifar10_moco step under
#                torch.profiler after warm-up, eager: the 25 most expensive CUDA kernels, the step
#                split into convolutions/matmuls, split BN, other elementwise, optimizer, strategy
#                + loss, beside the bare model's step; then captured (train.cuda_graphs' own
#                CapturedStep, replayed as the trainer replays it); for both the GPU-busy share
#                of the step (the union of the device's kernel, copy and set intervals per step
#                over the wall time per step) (on a CPU, --quick: eager, operators' CPU time,
#                tiny model)
#   train   (52) benchmarks/train.py --capture on --runs moco_resident: cifar10_moco on the
#                CIFAR-10 images (/tmp/data/cifar10, from .gpu/setup.sh), resident, captured
#                (train.cuda_graphs=on), as many whole epochs as fit: images/s, data-wait, epoch
#                time, kNN at the end (on a CPU, --quick: tiny model and images, one epoch each,
#                MoCo from the loader and MiOC resident, eager)
#   peers   (58) benchmarks/peers.py: lightly's CIFAR-10 benchmark MoCo beside cifar10_moco at
#                lightly's settings, matched (ResNet-18, batch 512, 2,048 of the CIFAR-10 images,
#                the two-key symmetric loss on both, the fp32 pair), negmine's loader
#                and resident paths, interleaved epoch by epoch in alternating order, a warm-up
#                epoch and as many timed ones as fit, at least 3 (fewer images where they do
#                not), kNN at the end; the OC-SVM beside scikit-learn and
#                thundersvm-cpu at n = 256, 1024, 4096 (on a CPU, --quick: tiny model and images,
#                one epoch, the fp32 pair, n = 256; the moco half skipped with a note where
#                lightly is not installed)
# 542 s of budgets in all (each at least the H200's seconds at d66eca4 or bf56f2b + 10 %; with the suite's
# own ~16 s and the 12 s kill margin, 570 s), and the whole run is held under --total (570 s, so
# that the suite and its set-up fit one 10-minute command): a part gets at most
# what is left of it (less 12 s for a kill), and a part with under 5 s left is not run (a
# failure). --quick (the CPU mode) triples the budgets and the total that were not given. Every part's whole output (stdout and stderr, unbuffered) goes to REPORT/PART.log;
# a part that fails or overruns prints its log's last lines, and the next part starts. Each
# benchmark appends its table to the results file (default REPORT/results.md with --report, else
# benchmarks/RESULTS.md) when it ends, and this script appends a line per part as soon as the part
# ends (passed / FAILED / timed out, with its seconds), so a run cut short keeps every table it
# measured (with another results file, this run's part of it is copied to REPORT/results.md at
# the end). At the end: REPORT/summary.md (one row per part: outcome, seconds, log; then the
# figures of train and profile in one table, also in REPORT/figures.md),
# REPORT/env.txt (GPU, torch, triton, commit) and REPORT.tar.gz, the folder packed in one file.
# Without --report the folder is runs/gpu_suite_<UTC time>. Without CUDA the CUDA-only parts are
# skipped (printed) and the rest runs on the CPU. A benchmark script or flag that this checkout
# lacks is skipped with a printed note.
# Exit status: 1 if any part that ran failed, timed out or was not run for lack of time, 2 on
# bad usage (or no device), else 0.
set -u
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH="${PWD}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1  # a killed part keeps its output up to the kill
PY="${PYTHON:-python}"
QUICK=()
RESULTS=""
REPORT=""
DRY=0
FORCE_DEVICE=""
TOTAL=570
OWN_S=16   # the suite's own seconds within --total (device probe, tables, pack), for sizing it
KILL_S=12  # a part gets what is left of --total less this (SIGKILL 10 s after SIGTERM)
ALL_PARTS="tests,sync,mioc,graphs,splitbn,ocsvm,step,input,profile,train,peers"
PARTS="$ALL_PARTS"
# sized from the H200 runs of d66eca4 and bf56f2b (2026-11-28; tests/benchmarks/test_gpu_suite.py
# H200_SECONDS): each at least its measured (or, where a part was cut, estimated) seconds + 10 %,
# and their sum + the suite's own ~16 s + the 12 s kill margin within TOTAL; to fit, train runs
# the captured step alone, peers the fp32 pair alone and ocsvm the clustered points alone
declare -A BUDGET=([tests]=87 [sync]=59 [mioc]=20 [graphs]=81 [splitbn]=19 [ocsvm]=45 [step]=33
                   [input]=40 [profile]=48 [train]=52 [peers]=58)
CIFAR="${NEGMINE_CIFAR10:-/tmp/data/cifar10}"  # the CIFAR-10 JPEG folder .gpu/setup.sh unpacks
declare -A GIVEN=()  # the budgets set with --budget (--quick leaves them alone)
TOTAL_GIVEN=0
usage() {
  echo "usage: $0 [--quick] [--report DIR] [--results PATH] [--parts LIST] [--budget PART=SECONDS]..." \
       "[--total SECONDS] [--device cpu|cuda] [--dry-run]" >&2
  exit 2
}
positive() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ]; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=(--quick); shift ;;
    --results) [ $# -ge 2 ] || usage; RESULTS="$2"; shift 2 ;;
    --report) [ $# -ge 2 ] || usage; REPORT="${2%/}"; shift 2 ;;
    --parts) [ $# -ge 2 ] || usage; PARTS="$2"; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    --device)
      [ $# -ge 2 ] || usage
      case "$2" in cpu|cuda) FORCE_DEVICE="$2" ;; *) echo "gpu_suite: --device $2: want cpu or cuda" >&2; exit 2 ;; esac
      shift 2 ;;
    --total)
      [ $# -ge 2 ] || usage
      if ! positive "$2"; then echo "gpu_suite: --total $2: want whole seconds >= 1" >&2; exit 2; fi
      TOTAL="$2"; TOTAL_GIVEN=1; shift 2 ;;
    --budget)
      [ $# -ge 2 ] || usage
      name="${2%%=*}"; secs="${2#*=}"
      if [ -z "${BUDGET[$name]+x}" ] || ! positive "$secs"; then
        echo "gpu_suite: --budget $2: want PART=SECONDS, PART one of ${ALL_PARTS//,/ }" >&2; exit 2
      fi
      BUDGET[$name]="$secs"; GIVEN[$name]=1; shift 2 ;;
    *) usage ;;
  esac
done
IFS=, read -r -a SELECTED <<< "$PARTS"
for part in "${SELECTED[@]}"; do
  if [ -z "${BUDGET[$part]+x}" ]; then
    echo "gpu_suite: --parts: unknown part '$part' (parts: $ALL_PARTS)" >&2; exit 2
  fi
done
if [ ${#QUICK[@]} -gt 0 ]; then  # a CPU runner is slower than a GPU host: 3x the time
  for part in "${!BUDGET[@]}"; do
    if [ -z "${GIVEN[$part]+x}" ]; then BUDGET[$part]=$((3 * BUDGET[$part])); fi
  done
  if [ "$TOTAL_GIVEN" = 0 ]; then TOTAL=$((3 * TOTAL)); fi
fi
START=$SECONDS
VERSIONS=""
if [ "$DRY" = 1 ] && [ -n "$FORCE_DEVICE" ]; then  # the plan for that device, whatever is here
  DEVICE="$FORCE_DEVICE"; NAME="(dry run)"
else
  if [ -n "$FORCE_DEVICE" ]; then export NEGMINE_DEVICE="$FORCE_DEVICE"; fi  # cuda: checked here
  # one interpreter for the device and the versions (a torch import costs seconds on a CPU)
  PROBE="$("$PY" -c "import platform, sys, torch
from pretrain.runtime import dist
cuda = dist.device_type() == 'cuda'  # CUDA if visible, unless NEGMINE_DEVICE=cpu
print('cuda' if cuda else 'cpu')
print(torch.cuda.get_device_name() if cuda else platform.processor() or platform.machine())
print('python:', sys.version.split()[0], platform.platform())
print('torch:', torch.__version__, 'cuda', torch.version.cuda)
for name in ('triton', 'torchvision'):
    try:
        print(name + ':', __import__(name).__version__)
    except ImportError:
        print(name + ': not installed')")" || PROBE=""
  { read -r DEVICE; read -r NAME; } <<< "$PROBE"
  VERSIONS="$(tail -n +3 <<< "$PROBE")"
  if [ -z "${DEVICE:-}" ]; then echo "gpu_suite: no device from $PY (the error above)" >&2; exit 2; fi
fi
if [ -z "$RESULTS" ]; then  # with --report, the tables go in it; else where they always went
  if [ -n "$REPORT" ]; then RESULTS="$REPORT/results.md"; else RESULTS="benchmarks/RESULTS.md"; fi
fi
if [ -z "$REPORT" ]; then REPORT="runs/gpu_suite_$(date -u +%Y%m%dT%H%M%SZ)"; fi
WORK=""
if [ "$DRY" = 0 ]; then
  mkdir -p "$REPORT" "$(dirname "$RESULTS")" || exit 2
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpu_suite.XXXXXX")" || exit 2
  trap 'rm -rf "$WORK"' EXIT
else
  WORK="${TMPDIR:-/tmp}/gpu_suite.XXXXXX"
fi
status=0
SUMMARY=()
note() { echo "gpu_suite: $*"; }
record() { if [ "$DRY" = 0 ]; then echo "- $*" >> "$RESULTS"; fi; }
summarize() { SUMMARY+=("| $1 | $2 | $3 | ${4:-} |"); }
show() {  # a command as one line, arguments with spaces in double quotes
  local a words=()
  for a in "$@"; do if [[ "$a" =~ [[:space:]] ]]; then words+=("\"$a\""); else words+=("$a"); fi; done
  echo "${words[*]}"
}

if [ "$DRY" = 1 ]; then
  note "dry run on ${DEVICE}: the plan, nothing is run or written"
else
  FROM_LINE=$(( $( (cat "$RESULTS" 2>/dev/null || true) | wc -l) + 1 ))  # this run's tables start here
  { echo; echo "## GPU suite $(date -u +%Y-%m-%dT%H:%MZ) on ${DEVICE} (${NAME}), parts ${PARTS}"; } >> "$RESULTS"
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "device: ${DEVICE} (${NAME})"
    echo "commit: ${NEGMINE_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo 'unknown (no git here; set NEGMINE_COMMIT)')}"
    git status --short 2>/dev/null | head -20 | sed 's/^/changed: /'
    echo "$VERSIONS"
    nvidia-smi 2>/dev/null || echo "nvidia-smi: not available"
  } > "$REPORT/env.txt"
  note "report folder ${REPORT} (results ${RESULTS})"
fi

part_budget() {  # the seconds part $1 gets now: its budget, or what is left of --total
  local budget="${BUDGET[$1]}" left=$((TOTAL - (SECONDS - START) - KILL_S))
  if [ "$left" -lt "$budget" ]; then echo "$left"; else echo "$budget"; fi
}

run_part() {  # run_part NAME CMD...: CMD under the part's budget, its output in REPORT/NAME.log
  local name="$1"; shift
  local budget left=$((TOTAL - (SECONDS - START) - KILL_S)) tic=$SECONDS rc outcome
  local log="$REPORT/$name.log"
  budget=$(part_budget "$name")
  if [ "$DRY" = 1 ]; then
    note "plan: part $name (budget ${BUDGET[$name]} s): $(show "$@")"
    return
  fi
  if [ "$left" -lt 5 ]; then
    outcome="not run (${TOTAL} s of --total spent)"; status=1
    note "part $name: $outcome"; record "$name: $outcome"; summarize "$name" "$outcome" 0
    return
  fi
  note "part $name (budget ${budget} s, log ${log}): $(show "$@")"
  echo "\$ $(show "$@")" > "$log"
  timeout -k 10 "$budget" "$@" >> "$log" 2>&1 < /dev/null
  rc=$?
  case $rc in
    0) outcome=passed ;;
    124|137) outcome="timed out (budget ${budget} s)"; status=1 ;;
    *) outcome="FAILED (exit $rc)"; status=1 ;;
  esac
  if [ "$rc" != 0 ]; then tail -n 15 "$log" | sed "s/^/  $name | /"; fi
  note "part $name: ${outcome} in $((SECONDS - tic)) s"
  record "$name: ${outcome} in $((SECONDS - tic)) s"
  summarize "$name" "$outcome" "$((SECONDS - tic))" "$name.log"
}

skip_part() { note "skip: $2"; record "$1: skipped ($2)"; summarize "$1" "skipped: $2" 0; }

bench_part() {  # bench_part NAME SCRIPT [flags...]: with the common flags, if script and flags exist
  local name="$1" script="$2"; shift 2
  if [ ! -f "$script" ]; then skip_part "$name" "$script is not in this checkout"; return; fi
  local f
  for f in --device --results --quick "$@"; do  # argparse's flags, read from the source (a
    case "$f" in --*) ;; *) continue ;; esac      # --help would import torch for each part)
    if ! grep -q -- "\"$f\"" "$script"; then skip_part "$name" "$script has no $f flag"; return; fi
  done
  run_part "$name" "$PY" "$script" --device "$DEVICE" --results "$RESULTS" "${QUICK[@]}" "$@"
}

part_tests() {
  if [ "$DEVICE" != cuda ]; then skip_part tests "cuda-marked tests (no CUDA device)"; return; fi
  run_part tests "$PY" -m pytest -q -rfEs -p no:cacheprovider -m cuda tests
}

part_sync() {
  if [ "$DEVICE" != cuda ]; then skip_part sync "--sync-debug error (CUDA only)"; return; fi
  bench_part sync benchmarks/step.py --mode all --sync-debug error --steps 3 \
    --settings "bf16 channels_last"
}

part_mioc() {  # the quick start, cut short; its metrics kept beside the log
  local out="$WORK/mioc" steps=(train.max_steps=90)
  if [ ${#QUICK[@]} -gt 0 ]; then steps=(train.max_steps=4 negatives.kwargs.warmup_epochs=0); fi
  run_part mioc "$PY" -m pretrain --cfg digits_mioc.yaml "${steps[@]}" train.log_every=1 \
    "out_dir=$out"
  if [ -f "$out/metrics.jsonl" ]; then cp "$out/metrics.jsonl" "$REPORT/mioc.metrics.jsonl"; fi
}

part_graphs() {
  if [ "$DEVICE" != cuda ]; then skip_part graphs "train.cuda_graphs (CUDA only)"; return; fi
  if [ ! -f benchmarks/graphs_check.py ]; then
    skip_part graphs "benchmarks/graphs_check.py is not in this checkout"; return
  fi
  run_part graphs "$PY" benchmarks/graphs_check.py --device cuda --steps 20 --keep "$REPORT"
}

part_splitbn() { bench_part splitbn benchmarks/split_bn.py; }

part_ocsvm() {  # --quick on CUDA too: 3 repeats (the full run passed 170 s on an H100); the
  # clustered points alone (the targets' figures; tight repeats every size: ~15 s more)
  if [ ${#QUICK[@]} -eq 0 ]; then bench_part ocsvm benchmarks/ocsvm.py --quick --generators clustered
  else bench_part ocsvm benchmarks/ocsvm.py; fi
}

part_step() {
  if [ "$DEVICE" = cuda ]; then
    bench_part step benchmarks/step.py --mode all --settings "bf16 channels_last"
  else
    bench_part step benchmarks/step.py  # the strategies table, --quick sizes
  fi
}

part_input() {
  if [ "$DEVICE" = cuda ]; then  # cifar10_moco's trainer rows alone, 10 steps a block: ~35 s
    bench_part input benchmarks/input.py --parts trainer decode --trainers cifar10_moco --steps 10
  else bench_part input benchmarks/input.py; fi
}

part_profile() {  # CUDA: the eager step, then the captured one (train.cuda_graphs) replayed
  local data=() capture=()
  if [ ${#QUICK[@]} -eq 0 ] && [ -d "$CIFAR/train" ]; then data=(--data "$CIFAR"); fi
  if [ "$DEVICE" = cuda ]; then capture=(--capture both); fi
  bench_part profile benchmarks/profile_step.py "${data[@]}" "${capture[@]}" \
    --summary "$REPORT/figures.md"
}

part_train() {  # stops its runs 15 s before its budget, so that it prints its tables itself
  local data=() budget
  budget=$(part_budget train)
  if [ -d "$CIFAR/train" ]; then data=(--data "$CIFAR"); fi
  # CUDA: the captured step alone, its 37 s the whole share (6 epochs at d66eca4); the eager
  # step's time is the profile part's (captured and eager, one process)
  local runs=(--runs moco_resident --capture on)
  # --quick: its own tiny images, and two runs that cover both recipes and both data paths
  if [ ${#QUICK[@]} -gt 0 ]; then data=(); runs=(--runs moco_loader,mioc_resident); fi
  bench_part train benchmarks/train.py "${data[@]}" "${runs[@]}" \
    --budget "$((budget > 20 ? budget - 15 : 5))" --keep "$REPORT/train" --summary "$REPORT/figures.md"
}

part_peers() {  # the training stops 30 s before the budget: start-up, kNN, OC-SVM, tables
  # the fp32 pair (lightly's benchmark's own precision) on both sides, on 2,048 + 2,000 of the
  # CIFAR-10 images: a warm-up epoch (lightly's ~13 s on the H200) and 3 timed ones (~2.5 s a
  # round) in its 28 s; peers.py sizes itself down where they do not fit (the bf16 pair too:
  # --budget peers=84 for both)
  local data=() sizes=(--ocsvm-sizes 256,1024,4096) budget
  local pairs=(--precision fp32 --train-images 2048 --test-images 2000)
  budget=$(part_budget peers)
  if [ -d "$CIFAR/train" ]; then data=(--data "$CIFAR"); fi
  if [ ${#QUICK[@]} -gt 0 ]; then data=(); sizes=(); pairs=(--precision fp32); fi  # tiny, n = 256
  bench_part peers benchmarks/peers.py "${data[@]}" --budget "$((budget > 40 ? budget - 30 : 10))" \
    "${pairs[@]}" "${sizes[@]}"
}

for part in "${SELECTED[@]}"; do "part_$part"; done
if [ "$DRY" = 1 ]; then
  sum=0; for part in "${SELECTED[@]}"; do sum=$((sum + BUDGET[$part])); done
  note "plan: ${sum} s of budgets, the whole held under ${TOTAL} s"
  note "plan: accounting: the suite's own ${OWN_S} s and a ${KILL_S} s kill margin within the total"
  exit 0
fi
note "done in $((SECONDS - START)) s, exit status ${status}"
record "suite: $((SECONDS - START)) s in all, exit status ${status}"
{
  echo "# GPU suite on ${DEVICE} (${NAME}), $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "| part | outcome | seconds | log |"
  echo "|---|---|---|---|"
  printf '%s\n' "${SUMMARY[@]}"
  echo
  echo "$((SECONDS - START)) s in all, exit status ${status}; tables in $(basename "$RESULTS"), machine in env.txt"
  if [ -s "$REPORT/figures.md" ]; then
    echo
    echo "| figure (train, profile) | value |"
    echo "|---|---|"
    cat "$REPORT/figures.md"
  fi
} > "$REPORT/summary.md"
cat "$REPORT/summary.md"
if [ "$RESULTS" != "$REPORT/results.md" ]; then  # this run's tables, beside the logs
  tail -n "+$FROM_LINE" "$RESULTS" > "$REPORT/results.md"
fi
if tar -czf "$REPORT.tar.gz" -C "$(dirname "$REPORT")" "$(basename "$REPORT")"; then
  note "packed: $REPORT.tar.gz"
fi
exit $status
