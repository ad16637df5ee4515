#!/usr/bin/env bash
# The science plan for one GPU lease (docs/gpu_suite.md#the-science-plan): benchmarks/science.py
# started in the first command and outliving it, followed and packed by the second.
#
#   benchmarks/gpu_lease.sh --dry-run     # here: the lease rule, each command, its timeout_s, the sums
#   benchmarks/gpu_lease.sh --dry-run --science-first   # (or --suite-first) that branch of the rule
#   benchmarks/gpu_lease.sh start         # on the GPU machine, command 1 (timeout_s START_S)
#   benchmarks/gpu_lease.sh finish        # on the GPU machine, command 2 (timeout_s FINISH_S)
#
# A lease is 900 device-seconds, the machine's start (START_ALLOWANCE_S) included, and a command
# runs at most 600 s. `start` sources .gpu/setup.sh (the CIFAR-10 JPEGs to /tmp/data/cifar10),
# starts science.py under setsid + nohup (its output in /tmp/science.log, its status in
# /tmp/science/status.json), waits until the first epochs are timed and the plan is decided,
# prints it, follows the runs until START_WAIT_S and returns. `finish` must be issued at once (the
# machine goes back after about 30 s idle, and the runs with it): it follows the status until
# done, or until its own deadline less PACK_S, when it stops science.py (SIGTERM: each run still
# going is reported "not run: would need N s"), then copies into $OUT the pack
# (science.tar.gz), the status, the log and the table as a RESULTS.md fragment (results.md: the
# machine, date and commit with it): four files, each < 16 MiB.
# The science budget is what the two commands leave it after the set-up and before the packing.
#
# The lease rule (--dry-run checks it): when the GPU suite's newest record in benchmarks/RESULTS.md
# ("GPU suite run of commit C") is at a commit C whose GPU-facing code (GPU_PATHS) has not changed
# since, run the science plan first; otherwise run benchmarks/gpu_suite.sh --total SUITE_TOTAL_S
# first, then the science plan with the rest. When no science schedule fits what the suite leaves,
# the rest of the lease runs the suite's parts that the trimmed suite cuts or does not reach
# (suite_rest: from gpu_suite.sh's own CUDA plan and accounting) under their own --total.
# SCIENCE_PLAN_FROM (default benchmarks/RESULTS.md): the results file whose newest speed sizes the
# science plan (science.py --plan-from).
set -u
cd "$(dirname "$0")/.." || exit 2
LEASE_S=900
START_ALLOWANCE_S=150   # the machine's start (2-3 min), counted in the lease
COMMAND_MAX_S=600       # one command's limit
START_S=260             # command 1's timeout_s
START_WAIT_S=240        # command 1 returns here (the plan is decided well before)
FINISH_S=480            # command 2's timeout_s
PACK_S=45               # command 2's time to stop, pack and copy
SETUP_S=20              # .gpu/setup.sh before science.py starts
SUITE_TOTAL_S=300       # the suite's --total when it runs first
SUITE_S=330             # its command's timeout_s
REST_REPORT="\$OUT/gpu2" # the rest of the suite's report folder (command 1 when science does not fit)
GPU_PATHS=(pretrain negatives negmine_core linear_eval benchmarks/gpu_suite.sh ':(exclude)*.md')
SCI_DIR=/tmp/science
STATUS=$SCI_DIR/status.json
LOG=/tmp/science.log
PY="${PYTHON:-python3}"
PLAN_FROM="${SCIENCE_PLAN_FROM:-benchmarks/RESULTS.md}"

# science.py --arms. Default: the pair not yet kept in docs/results/logs, the project's question
# first (MiOC and its ablation, O = the whole queue), then MoCo with the demo's symmetric MoCo: two
# concurrent arms are what one lease holds at today's speed, and a lone arm of a pair answers nothing.
default_arms() {
  if compgen -G "docs/results/logs/cifar10_mioc_queue_*" >/dev/null; then
    echo "moco_sym,moco"
  else
    echo "mioc,mioc_queue"
  fi
}
ARMS="${SCIENCE_ARMS:-$(default_arms)}"
usage() {
  echo "usage: [SCIENCE_ARMS=LIST] [SCIENCE_PLAN_FROM=RESULTS] $0 --dry-run [--suite-first|--science-first] | start [BUDGET_S] | finish" >&2
  exit 2
}

# the seconds science.py gets: command 1 after the set-up, then command 2 less the packing
budget() { echo $(( START_WAIT_S - SETUP_S + FINISH_S - PACK_S )); }

status_field() {  # status_field EXPR: a Python expression over the status dict `s`
  "$PY" - "$STATUS" "$1" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print("")
else:
    print(eval(sys.argv[2], {}, {"s": s}))
PY
}

progress() {
  "$PY" - "$STATUS" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit()
runs = "; ".join(f"{n} {r['state']} {r['epoch']}/{r['epochs']}"
                 + (f" ~{r['finish_in_s']:.0f} s" if r.get("finish_in_s") else "")
                 for n, r in s["runs"].items())
print(f"  {s['elapsed_s']:.0f} s: {runs}", flush=True)
PY
}

rule() {  # prints the rule's branch; exit status 0: science first, 1: the suite first
  local record
  record=$(grep -o 'GPU suite run of commit [0-9a-f]\{7,40\}' benchmarks/RESULTS.md | tail -1 | awk '{print $NF}')
  if [ -z "$record" ]; then
    echo "lease rule: no GPU suite record in benchmarks/RESULTS.md: run the suite first"; return 1
  fi
  if ! git cat-file -e "$record^{commit}" 2>/dev/null; then
    echo "lease rule: the suite's record names commit $record, unknown here: run the suite first"; return 1
  fi
  if git diff --quiet "$record" HEAD -- "${GPU_PATHS[@]}" && git diff --quiet HEAD -- "${GPU_PATHS[@]}"; then
    echo "lease rule: the GPU suite's record at $record holds (GPU-facing code unchanged since): run the science plan first"
    return 0
  fi
  echo "lease rule: GPU-facing code changed since the suite's record at $record" \
       "($(git diff --name-only "$record" -- "${GPU_PATHS[@]}" | wc -l) files): run the suite first (--total $SUITE_TOTAL_S), then the science plan with the rest"
  return 1
}

suite_rest() {  # suite_rest TOTAL [PARTS]: "PART,PART,... NEED" or ""
  # The parts (of PARTS, default all) that `gpu_suite.sh --total TOTAL` cuts or does not reach
  # when every part before them runs its whole budget, read from the suite's own CUDA plan (the
  # parts in order, their budgets) and accounting (its own seconds, then a part gets what is left
  # of the total less the kill margin); NEED: the --total those parts need on their own.
  local plan own kill part b elapsed need rest=()
  plan=$(bash benchmarks/gpu_suite.sh --dry-run --device cuda --total "$1" ${2:+--parts "$2"}) || return 2
  read -r own kill < <(sed -n "s/^gpu_suite: plan: accounting: the suite's own \([0-9]*\) s and a \([0-9]*\) s kill margin.*/\1 \2/p" <<< "$plan")
  if [ -z "${kill:-}" ] || ! grep -q '^gpu_suite: plan: part ' <<< "$plan"; then
    echo "gpu_lease: benchmarks/gpu_suite.sh --dry-run --device cuda printed no parts or no accounting line" >&2
    return 2
  fi
  elapsed=$own; need=$(( own + kill ))
  while read -r part b; do
    if [ ${#rest[@]} -eq 0 ] && [ $(( elapsed + b + kill )) -le "$1" ]; then
      elapsed=$(( elapsed + b )); continue
    fi
    rest+=("$part"); need=$(( need + b ))
  done < <(sed -n 's/^gpu_suite: plan: part \([a-z0-9_]*\) (budget \([0-9]*\) s).*/\1 \2/p' <<< "$plan")
  if [ ${#rest[@]} -gt 0 ]; then (IFS=,; echo "${rest[*]} $need"); fi
}

dry_run() {
  local suite_first=$1 commit dirty b total rest="" rest_parts rest_need rest_total REST_S=0
  echo "# the science plan for one GPU lease ($LEASE_S device-seconds, ${START_ALLOWANCE_S} s of it the machine's start)"
  if [ "$suite_first" = auto ]; then
    if rule; then suite_first=0; else suite_first=1; fi
  fi
  commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  dirty=0
  if ! git diff --quiet HEAD 2>/dev/null; then dirty=1; fi
  if [ "$suite_first" = 1 ]; then
    START_WAIT_S=120; START_S=140; FINISH_S=$(( LEASE_S - START_ALLOWANCE_S - SUITE_S - START_S ))
    echo "command 0 (timeout_s $SUITE_S): . .gpu/setup.sh && bash benchmarks/gpu_suite.sh --report \$OUT/gpu --total $SUITE_TOTAL_S"
  fi
  b=$(budget)
  local science
  science=$("$PY" benchmarks/science.py --plan-from "$PLAN_FROM" --budget "$b" ${ARMS:+--arms "$ARMS"} --dry-run) || return 2
  total=$(( START_ALLOWANCE_S + START_S + FINISH_S ))
  if [ "$suite_first" = 1 ]; then total=$(( total + SUITE_S )); fi
  if grep -q "nothing to run" <<< "$science" && [ "$suite_first" = 1 ]; then
    rest=$(suite_rest "$SUITE_TOTAL_S") || return 2
  fi
  if grep -q "nothing to run" <<< "$science" && [ -n "$rest" ]; then
    # the rest of the lease for the suite's parts that command 0 does not run whole
    read -r rest_parts rest_need <<< "$rest"
    REST_S=$(( LEASE_S - START_ALLOWANCE_S - SUITE_S ))
    if [ "$REST_S" -gt "$COMMAND_MAX_S" ]; then REST_S=$COMMAND_MAX_S; fi
    rest_total=$(( REST_S - (SUITE_S - SUITE_TOTAL_S) ))  # the set-up's margin, as command 0's
    echo "science: not in this lease ($(grep -o 'no schedule fits.*' <<< "$science")): the rest of the suite instead"
    echo "command 1 (timeout_s $REST_S): . .gpu/setup.sh && bash benchmarks/gpu_suite.sh --report $REST_REPORT --parts $rest_parts --total $rest_total"
    echo "rest of the suite: the parts command 0 cuts or does not reach (--total $SUITE_TOTAL_S), $rest_parts: $rest_need s of --total with the suite's own time and kill margin; $rest_total s given"
    if [ "$rest_total" -lt "$rest_need" ]; then
      echo "rest of the suite: still cut or not reached in this lease: $(suite_rest "$rest_total" "$rest_parts" | cut -d' ' -f1)"
    fi
    START_S=0; FINISH_S=0; total=$(( START_ALLOWANCE_S + SUITE_S + REST_S ))
  elif grep -q "nothing to run" <<< "$science"; then
    echo "science: not in this lease ($(grep -o 'no schedule fits.*' <<< "$science")): give the machine back after the suite"
    START_S=0; FINISH_S=0; total=$(( START_ALLOWANCE_S + SUITE_S ))
  else
    echo "command 1 (timeout_s $START_S): NEGMINE_COMMIT=$commit NEGMINE_DIRTY=$dirty${ARMS:+ SCIENCE_ARMS=$ARMS}${SCIENCE_PLAN_FROM:+ SCIENCE_PLAN_FROM=$PLAN_FROM} bash benchmarks/gpu_lease.sh start $b"
    echo "command 2 (timeout_s $FINISH_S, issued at once after command 1): bash benchmarks/gpu_lease.sh finish"
  fi
  local sum="machine start $START_ALLOWANCE_S s"
  if [ "$suite_first" = 1 ]; then sum="$sum + suite $SUITE_S s"; fi
  if [ "$START_S" -gt 0 ]; then sum="$sum + command 1 $START_S s + command 2 $FINISH_S s"; fi
  if [ "$REST_S" -gt 0 ]; then sum="$sum + rest of the suite $REST_S s"; fi
  echo "budget: $sum = $total s of $LEASE_S s (each command <= $COMMAND_MAX_S s)"
  if [ "$START_S" -gt 0 ]; then
    echo "science budget: $START_WAIT_S s (command 1 returns) - $SETUP_S s (set-up) + $FINISH_S s (command 2) - $PACK_S s (stop, pack, copy) = $b s"
  fi
  if [ "$REST_S" -gt 0 ]; then
    echo "comes back in \$OUT: each command's suite report (gpu/, gpu.tar.gz; gpu2/, gpu2.tar.gz): append each results.md to benchmarks/RESULTS.md"
  else
    echo "comes back in \$OUT: science.tar.gz (the kept runs, < 16 MiB), status.json, science.log, results.md (append it to benchmarks/RESULTS.md)"
    echo "then here: mkdir -p /tmp/sci && tar -xzf science.tar.gz -C /tmp/sci && for r in /tmp/sci/science/*/; do python scripts/gen_results.py --keep \$r \$(basename \$r); done; python scripts/gen_results.py"
  fi
  echo "$science"
  if [ "$total" -gt "$LEASE_S" ] || [ "$START_S" -gt "$COMMAND_MAX_S" ] || [ "$FINISH_S" -gt "$COMMAND_MAX_S" ] \
     || [ "$REST_S" -gt "$COMMAND_MAX_S" ]; then
    echo "the plan does not fit the lease" >&2; return 1
  fi
}

start() {
  local b=${1:-$(budget)} t0=$SECONDS
  # shellcheck disable=SC1091
  . .gpu/setup.sh || { echo "gpu_lease: .gpu/setup.sh failed (bash ../shared/gpu/prepare.sh CIFAR_GIT_DIR builds it)" >&2; exit 2; }
  rm -rf "$SCI_DIR" && mkdir -p "$SCI_DIR"
  setsid nohup "$PY" benchmarks/science.py --plan-from "$PLAN_FROM" --budget "$b" \
    ${ARMS:+--arms "$ARMS"} --out "$SCI_DIR" --status "$STATUS" --results "$SCI_DIR/results.md" > "$LOG" 2>&1 < /dev/null &
  echo $! > "$SCI_DIR/pid"
  echo "gpu_lease: science.py started (pid $(cat "$SCI_DIR/pid"), budget $b s); log $LOG"
  local said=0
  while [ $((SECONDS - t0)) -lt "$START_WAIT_S" ]; do
    sleep 5
    if [ "$(status_field 's["done"]')" = True ]; then break; fi
    if [ "$said" = 0 ] && [ "$(status_field 's["plan"]["decided"]')" = True ]; then
      echo "gpu_lease: plan: $(status_field 's["plan"]["line"]')"; said=1
    fi
    if ! kill -0 "$(cat "$SCI_DIR/pid")" 2>/dev/null && [ "$(status_field 's["done"]')" != True ]; then
      echo "gpu_lease: science.py left early:"; tail -20 "$LOG"; exit 1
    fi
    if [ $(( (SECONDS - t0) % 30 )) -lt 5 ]; then progress; fi
  done
  grep '^science: ' "$LOG" | head -3
  progress
  echo "gpu_lease: issue command 2 now: bash benchmarks/gpu_lease.sh finish"
}

finish() {
  local t0=$SECONDS deadline=$(( FINISH_S - PACK_S )) pid
  pid=$(cat "$SCI_DIR/pid" 2>/dev/null || echo "")
  while [ $((SECONDS - t0)) -lt "$deadline" ] && [ "$(status_field 's["done"]')" != True ]; do
    sleep 5
    if [ $(( (SECONDS - t0) % 60 )) -lt 5 ]; then progress; fi
  done
  if [ "$(status_field 's["done"]')" != True ] && [ -n "$pid" ]; then
    echo "gpu_lease: command 2's deadline: stopping science.py (its runs still going are reported not run)"
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 $(( PACK_S - 10 ))); do
      [ "$(status_field 's["done"]')" = True ] && break; sleep 1
    done
  fi
  mkdir -p "${OUT:?gpu_lease: finish copies into \$OUT}"
  for f in "$SCI_DIR/science.tar.gz" "$STATUS" "$LOG" "$SCI_DIR/results.md"; do
    if [ -f "$f" ]; then cp "$f" "$OUT/"; else echo "gpu_lease: missing $f"; fi
  done
  cat "$SCI_DIR/science.md" 2>/dev/null || tail -30 "$LOG"
  ls -l "$OUT"
}

case "${1:-}" in
  --dry-run)
    case "${2:-}" in
      --suite-first) dry_run 1 ;; --science-first) dry_run 0 ;; "") dry_run auto ;; *) usage ;;
    esac ;;
  start) start "${2:-}" ;;
  finish) finish ;;
  *) usage ;;
esac
