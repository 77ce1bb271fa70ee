#!/usr/bin/env bash
# ZeRO++ on the namespace cluster (scripts/cluster.sh): bytes across nodes and step time of
# stage 2, plain stage 3 and stage 3 with each ZeRO++ part and all three (docs/benchmarks.md,
# "ZeRO++ across nodes"; Note [ZeRO++] in src/engine/stage3_engine.cpp).
#   bench/zeropp_traffic.sh [MODEL=gpt2-tiny] [STEPS=6] [RATES="1gbit 10gbit"] [NODES="2 4"] [DTYPE=fp32]
# For each link rate and node count (2 ranks per node, hierarchical collectives): one
# zero-train run per variant, micro-batch 1 x 64 tokens, stage3_max_reuse_distance 0 (every
# backward gathers again: ZeRO's 3 x Psi, the paper's setting). Step time: the median of the
# steps after the first; bytes: the summary's "across nodes" row (all ranks, per step).
# Needs root (the cluster); uses cluster id 233.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-gpt2-tiny}"; steps="${2:-6}"; rates="${3:-1gbit 10gbit}"; node_counts="${4:-2 4}"
dtype="${5:-fp32}"
work=/tmp/zero-zeropp-bench
rm -rf "$work"; mkdir -p "$work"
cluster=(scripts/cluster.sh)
args=(--dir "$work/nodes" --id 233)
trap '"${cluster[@]}" down "${args[@]}" >/dev/null 2>&1' EXIT
precision=""
[ "$dtype" = bf16 ] && precision='"bf16": {"enabled": true}, '
config() {  # config NAME STAGE ZERO_EXTRA
  echo "{${precision}\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3}}, \"zero_optimization\": {\"stage\": $2, \"stage3_max_reuse_distance\": 0$3}}" >"$work/$1.json"
}
config stage2 2 ""
config stage3 3 ""
config qwZ 3 ', "zero_quantized_weights": true'
config hpZ 3 ', "zero_hpz_partition_size": 2'
config qgZ 3 ', "zero_quantized_gradients": true'
config all 3 ', "zero_quantized_weights": true, "zero_hpz_partition_size": 2, "zero_quantized_gradients": true'
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "zeropp_traffic model=$model steps=$steps dtype=$dtype cpu='$cpu' cores=$(nproc) date=$(date -u +%F)"
printf "%-7s %-6s %-8s %-9s %-14s %s\n" rate nodes variant "step ms" "across/step" "vs plain stage 3"
for rate in $rates; do
  for nodes in $node_counts; do
    "${cluster[@]}" up "$nodes" --rate "$rate" "${args[@]}" >/dev/null
    for variant in stage2 stage3 qwZ hpZ qgZ all; do
      run="$work/run-$rate-$nodes-$variant"
      build/bin/zero-run -n $((2 * nodes)) --hostfile "$work/nodes/hostfile" -- build/bin/zero-train \
        --config "$work/$variant.json" --model "$model" --steps "$steps" --eval-every 0 \
        --sample-tokens 1 --seq-len 64 --out "$run" >"$run.log" 2>&1 \
        || { echo "FAILED: $run"; tail -5 "$run.log"; exit 1; }
      step_ms="$(tail -n +3 "$run/metrics.csv" | cut -d, -f9 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
      across="$(grep -m1 'across nodes' "$run.log" | awk '{print $3, $4}')"
      less="$(grep -m1 'across nodes' "$run.log" | grep -o '[0-9.]* x less' || true)"
      printf "%-7s %-6s %-8s %-9s %-14s %s\n" "$rate" "$nodes" "$variant" "$step_ms" "$across" "$less"
    done
  done
done
