#!/usr/bin/env bash
# Every negative strategy / loss baseline on the embedded digits, 3 seeds each, then one
# table (python -m linear_eval table). Re-running skips finished runs and resumes unfinished ones.
#
#   bash benchmarks/strategy_table.sh [OUT_ROOT=runs/table_digits] [PARALLEL=2] [EPOCHS=30]
#   METHODS="moco decoupled" bash benchmarks/strategy_table.sh ...   # a subset (moco: the baseline)
#
# Each run: the method's shipped digits config (pretrain/configs/digits_METHOD.yaml; a method
# without one is skipped, named) with seed=S, train.epochs=EPOCHS, one thread per run; then
# python -m linear_eval --ckpt (kNN + the SGD linear probe, per-image results). Built-in
# strategies only: for a plugin (an installed one, or a file), a loss, or one method over seeds,
# use python benchmarks/seeds.py NAME [--plugins FILE] [--seeds 0 1 2] [--baseline]. The results
# page's digits rows are kept runs of the 30-epoch recipes (docs/results/logs/, written by
# python scripts/gen_results.py), not this script's output.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/table_digits}
PARALLEL=${2:-2}
EPOCHS=${3:-30}
read -r -a METHODS <<< "${METHODS:-moco mioc mochi modified_mochi debiased hard ring decoupled imix adco fnc}"
job() {  # method seed
    local m=$1 s=$2 cfg="digits_$1.yaml" extra=()
    if [ "$m" = modified_mochi ]; then cfg=digits_mochi.yaml; extra=(negatives.name=modified_mochi); fi
    [ -f "pretrain/configs/$cfg" ] || { echo "skip $m: no $cfg"; return 0; }
    local run="$OUT/${m}_s$s"
    if [ ! -f "$run/eval/linear_eval.json" ]; then
        python -m pretrain --cfg "$cfg" "${extra[@]}" seed="$s" train.epochs="$EPOCHS" train.threads=1 \
            train.progress_bar=false out_dir="$run" > "$run.log" 2>&1 || { echo "FAILED $run"; return 0; }
        OMP_NUM_THREADS=1 python -m linear_eval --ckpt "$run/checkpoints/last.pt" >> "$run.log" 2>&1
    fi
    echo "done $run"
}
export -f job
export OUT EPOCHS
mkdir -p "$OUT"
for s in 0 1 2; do for m in "${METHODS[@]}"; do echo "$m $s"; done; done \
    | xargs -P "$PARALLEL" -n 2 bash -c 'job "$0" "$1"'
python -m linear_eval table "$OUT"/*_s[0-9] --baseline "$OUT/moco_s0" --out "$OUT/table"
