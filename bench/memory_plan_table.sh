#!/usr/bin/env bash
# The memory planner against measured peaks (docs/benchmarks.md, "Memory planner"): for each
# model, stage 0-3, world 1, 2 and 4 ranks, without and with activation checkpointing, one
# bench_memory_plan run (a few fp32 steps; the peak of every byte a rank holds during the last,
# next to the plan's). Prints the markdown rows.
# HOST_CACHE=fast measures zero::hold_host_memory_to_peak(false) (default: exact, zero's default).
#   [RANKS="1 2 4"] [HOST_CACHE=exact|fast] bench/memory_plan_table.sh [MODELS="gpt2-tiny:2:128 gpt2-mini:2:128 gpt2:1:256 gpt2-medium:1:256"]
# Each model is NAME:MICRO_BATCH:SEQ. Build first: cmake --build build --target bench_memory_plan
set -euo pipefail
cd "$(dirname "$0")/.."
models="${1:-gpt2-tiny:2:128 gpt2-mini:2:128 gpt2:1:256 gpt2-medium:1:256}"
bench=build/bench/bench_memory_plan
export OPENBLAS_CORETYPE= OMP_WAIT_POLICY=PASSIVE
echo "| model | stage | ranks | batch x seq | checkpointing | planned peak (MiB) | measured peak (MiB) | measured / planned | step added (MiB) | planned with baseline (MiB) | peak RSS (MiB) | RSS / plan | step (s) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for spec in $models; do
  IFS=: read -r model batch seq <<<"$spec"
  for ranks in ${RANKS:-1 2 4}; do
    for stage in 0 1 2 3; do
      for checkpointing in off on; do
        mpirun --allow-run-as-root --oversubscribe -np "$ranks" "$bench" --model "$model" \
          --stage "$stage" --batch "$batch" --seq "$seq" --steps 3 --checkpointing "$checkpointing" \
          --host-cache "${HOST_CACHE:-exact}" |
          grep '^|'
      done
    done
  done
done
