#!/usr/bin/env bash
# ZeRO++'s effect on convergence (docs/benchmarks.md, "ZeRO++ across nodes", the convergence
# table): plain stage 3 against stage 3 with all three ZeRO++ parts (qwZ, hpZ, qgZ), the same
# model, data order and seed, on 4 ranks cut into 2 virtual nodes of 2 (ZERO_RANKS_PER_NODE=2,
# hierarchical collectives), fp32, AdamW lr 1e-3, micro-batch 1 x 64 tokens,
# stage3_max_reuse_distance 0. Prints the table's markdown rows: the loss at the last step,
# the mean of the last 20 steps, the final validation loss, and the bytes across nodes per step
# (the summary's row, all ranks together).
#   bench/zeropp_convergence.sh [MODEL=gpt2-mini] [STEPS=300]
# About 40 minutes for the defaults on a 2-core machine (gpt2-mini, 300 steps, two runs).
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-gpt2-mini}"; steps="${2:-300}"
work=/tmp/zero-zeropp-convergence
rm -rf "$work"; mkdir -p "$work"
config() {  # NAME ZERO_EXTRA
  echo "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3}}, \"zero_optimization\": {\"stage\": 3, \"stage3_max_reuse_distance\": 0$2}, \"seed\": 1234}" >"$work/$1.json"
}
config plain ""
config all ', "zero_quantized_weights": true, "zero_hpz_partition_size": 2, "zero_quantized_gradients": true'
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
flags="$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|avx512_fp16|amx_bf16)$' | tr '\n' ' ')"
echo "zeropp_convergence model=$model steps=$steps cpu='$cpu' flags='$flags' cores=$(nproc) date=$(date -u +%F)"
echo "| run | loss at step $steps | mean of steps $((steps - 19))-$steps | validation loss | across nodes / step |"
echo "|---|---|---|---|---|"
declare -A last mean val across
mib() { awk '{ f = $2 == "GiB" ? 1024 : $2 == "KiB" ? 1 / 1024 : $2 == "B" ? 1 / 1048576 : 1; print $1 * f }'; }
rel() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.2f %%", (a / b - 1) * 100 }'; }
for variant in plain all; do
  run="$work/run-$variant"
  ZERO_RANKS_PER_NODE=2 build/bin/zero-run -n 4 -- build/bin/zero-train --config "$work/$variant.json" \
    --model "$model" --steps "$steps" --eval-every "$steps" --sample-tokens 1 --seq-len 64 \
    --out "$run" >"$run.log" 2>&1 || { echo "FAILED: $run"; tail -5 "$run.log"; exit 1; }
  # metrics.csv: step,loss,val_loss,...
  last[$variant]="$(awk -F, -v s="$steps" '$1 == s { print $2 }' "$run/metrics.csv")"
  mean[$variant]="$(awk -F, -v s="$steps" 'NR > 1 && $1 > s - 20 { t += $2; n++ } END { printf "%.4f", t / n }' "$run/metrics.csv")"
  val[$variant]="$(awk -F, -v s="$steps" '$1 == s { print $3 }' "$run/metrics.csv")"
  across[$variant]="$(grep -m1 '^ *across nodes' "$run.log" | awk '{print $3, $4}')"
done
printf "| plain stage 3 | %.4f | %s | %.4f | %s |\n" "${last[plain]}" "${mean[plain]}" "${val[plain]}" "${across[plain]}"
ratio="$(awk -v a="$(mib <<<"${across[plain]}")" -v b="$(mib <<<"${across[all]}")" 'BEGIN { printf "%.1f", a / b }')"
printf "| all three ZeRO++ parts | %.4f (%s) | %s (%s) | %.4f (%s) | %s (%sx less) |\n" \
  "${last[all]}" "$(rel "${last[all]}" "${last[plain]}")" "${mean[all]}" "$(rel "${mean[all]}" "${mean[plain]}")" \
  "${val[all]}" "$(rel "${val[all]}" "${val[plain]}")" "${across[all]}" "$ratio"
