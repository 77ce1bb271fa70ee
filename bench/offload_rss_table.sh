#!/usr/bin/env bash
# Peak RSS against the memory plan for the larger models and the offloaded configs
# (docs/benchmarks.md, "Memory plan against the resident set: the larger models"), which
# bench_memory_plan does not run: one zero-train run per row, a few steps at 2 ranks, its own
# summary's plan and VmHWM per rank. Prints the markdown rows.
#   bench/offload_rss_table.sh [ROWS="gpt2-medium:configs/zero-infinity.json:off ..."]
# Each row is MODEL:CONFIG:CHECKPOINTING (on|off). NVMe configs write under /tmp/zero-nvme.
# Build first: cmake --build build --target zero-train
set -euo pipefail
cd "$(dirname "$0")/.."
rows="${1:-gpt2-medium:configs/zero-infinity.json:off gpt2-large:configs/zero-infinity.json:off
  gpt2-large:configs/zero-infinity.json:on gpt2-xl:configs/zero-infinity.json:off
  gpt2-xl:configs/gpt2-xl-nvme.json:off gpt2-xl:configs/gpt2-xl-infinity.json:off
  gpt2-xl:configs/gpt2-xl-infinity.json:on}"
steps="${STEPS:-3}"
mkdir -p /tmp/zero-nvme
export OPENBLAS_CORETYPE= OMP_WAIT_POLICY=PASSIVE
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| model | config | checkpointing | knobs zero fitted | planned peak | peak RSS rank 0 | peak RSS rank 1 | steps (s) |"
echo "|---|---|---|---|---|---|---|---|"
for row in $rows; do
  IFS=: read -r model config checkpointing <<<"$row"
  flags=()
  [ "$checkpointing" = on ] && flags+=(--activation-checkpointing)
  log="$out/run.log"
  build/bin/zero-run -n 2 -- build/bin/zero-train --config "$config" --model "$model" \
    --seq-len 128 --steps "$steps" --eval-every "$steps" --eval-batches 1 --sample-tokens 1 \
    --out "$out/run" "${flags[@]}" >"$log" 2>&1 || { echo "| $model | $config | failed: $(tail -1 "$log") |"; continue; }
  fitted=$(grep -o 'so zero uses .*: planned peak' "$log" | sed 's/so zero uses //; s/: planned peak//; s/zero_optimization\.//g' || true)
  planned=$(grep -o 'planned peak per rank: [0-9.]* [KMG]iB' "$log" | head -1 | sed 's/planned peak per rank: //')
  # "peak RSS, rank 0   8.8 GiB  planned 8.9 GiB: -1.3 %" -> "8.8 GiB (-1.3 %)"
  rss() { grep "peak RSS, rank $1 " "$log" | sed -E 's/.*rank [0-9]+ +([0-9.]+ [KMG]iB) +planned .*: (.*)/\1 (\2)/'; }
  steps_s=$(awk -F, 'NR > 1 && $9 != "" {printf "%s%.1f", sep, $9 / 1000; sep = ", "}' "$out/run/metrics.csv")
  echo "| $model | $(basename "$config") | $checkpointing | ${fitted:--} | $planned | $(rss 0) | $(rss 1) | $steps_s |"
  rm -rf /tmp/zero-nvme/*
done
