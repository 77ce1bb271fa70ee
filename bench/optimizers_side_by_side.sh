#!/usr/bin/env bash
# Each optimizer's example config (configs/{adamw: stage3.json's optimizer, adagrad, lion,
# lamb, muon}.json) training the same model on the same data for STEPS steps at ZeRO stage 2 on 2
# ranks, in fp32 (the configs' bf16 sections taken out, so every run computes alike), with
# the final training and validation losses side by side (docs/benchmarks.md, issue 42).
#   bench/optimizers_side_by_side.sh [STEPS=300] [MODEL=gpt2-mini] [SEQ=64] [OPTIMIZERS]
# OPTIMIZERS: a space-separated subset of "adamw adagrad lion lamb muon" (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-300}"; model="${2:-gpt2-mini}"; seq="${3:-64}"
optimizers="${4:-adamw adagrad lion lamb muon}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for optimizer in $optimizers; do
  source_config="configs/$optimizer.json"
  [ "$optimizer" = adamw ] && source_config=configs/stage3.json
  python3 - "$source_config" "$work/$optimizer.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config.pop("bf16", None)
config["compute_data_type"] = "fp32"
config["zero_optimization"] = {"stage": 2}
config.pop("scheduler", None)
json.dump(config, open(sys.argv[2], "w"))
PY
  start=$(date +%s)
  build/bin/zero-run -n 2 -- build/bin/zero-train --config "$work/$optimizer.json" --model "$model" \
    --seq-len "$seq" --steps "$steps" --eval-every "$steps" --eval-batches 8 \
    --out "$work/run-$optimizer" >"$work/$optimizer.log" 2>&1 ||
    { cat "$work/$optimizer.log"; exit 1; }
  end=$(date +%s)
  optimizer_line=$(python3 -c "import json; print(json.dumps(json.load(open('$work/$optimizer.json'))['optimizer']))")
  first=$(sed -n 2p "$work/run-$optimizer/metrics.csv" | cut -d, -f2)
  last=$(tail -n 1 "$work/run-$optimizer/metrics.csv" | cut -d, -f2,3)
  echo "$optimizer: $optimizer_line | loss step 1 $first | step $steps train,validation $last | $((end - start)) s"
done
