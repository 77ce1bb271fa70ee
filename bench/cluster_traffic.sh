#!/usr/bin/env bash
# Bytes across nodes and step time on the namespace cluster (scripts/cluster.sh), flat ring
# against the hierarchical collectives (docs/benchmarks.md, "Across nodes").
#   bench/cluster_traffic.sh [MODEL=gpt2-tiny] [STEPS=5] [RATES="1gbit 10gbit"] [NODES="2 4"]
# For each link rate, node count (2 ranks per node) and ZeRO stage 2 and 3: one zero-train
# run per schedule (ZERO_HIERARCHICAL_COLLECTIVES=0/1), fp32, micro-batch 1 x 64 tokens; the
# step time is the median of the steps after the first, the bytes are the summary's "across
# nodes" row (all ranks, per step). Needs root (the cluster); uses id 232.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-gpt2-tiny}"; steps="${2:-5}"; rates="${3:-1gbit 10gbit}"; node_counts="${4:-2 4}"
work=/tmp/zero-cluster-bench
rm -rf "$work"; mkdir -p "$work"
cluster=(scripts/cluster.sh)
args=(--dir "$work/nodes" --id 232)
trap '"${cluster[@]}" down "${args[@]}" >/dev/null 2>&1' EXIT
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "cluster_traffic model=$model steps=$steps cpu='$cpu' cores=$(nproc) date=$(date -u +%F)"
printf "%-7s %-6s %-6s %-13s %-13s %-14s %s\n" rate nodes stage schedule "step ms" "across/step" "per-rank volume"
for rate in $rates; do
  for nodes in $node_counts; do
    "${cluster[@]}" up "$nodes" --rate "$rate" "${args[@]}" >/dev/null
    ranks=$((2 * nodes))
    for stage in 2 3; do
      echo "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3}}, \"zero_optimization\": {\"stage\": $stage}}" >"$work/stage$stage.json"
      for hierarchical in 0 1; do
        run="$work/run-$rate-$nodes-$stage-$hierarchical"
        ZERO_HIERARCHICAL_COLLECTIVES=$hierarchical build/bin/zero-run -n "$ranks" \
          --hostfile "$work/nodes/hostfile" -- build/bin/zero-train --config "$work/stage$stage.json" \
          --model "$model" --steps "$steps" --eval-every 0 --sample-tokens 1 --seq-len 64 \
          --out "$run" >"$run.log" 2>&1 || { echo "FAILED: $run"; tail -5 "$run.log"; exit 1; }
        step_ms="$(tail -n +3 "$run/metrics.csv" | cut -d, -f9 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
        across="$(grep -m1 'across nodes' "$run.log" | awk '{print $3, $4}')"
        volume="$(grep -m1 'communicated per step' "$run.log" | awk '{print $4, $5}')"
        printf "%-7s %-6s %-6s %-13s %-13s %-14s %s\n" "$rate" "$nodes" "$stage" \
          "$([ "$hierarchical" = 1 ] && echo hierarchical || echo flat)" "$step_ms" "$across" "$volume"
      done
    done
  done
done
