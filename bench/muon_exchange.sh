#!/usr/bin/env bash
# Note [Muon under partitioning]: the owner exchange against every holder orthogonalising what
# it holds pieces of, on MODEL, for each "RANKS:STAGE" case, both modes in one run per case
# (bench/bench_muon_exchange.cpp; docs/benchmarks.md "Muon's exchange").
#   bench/muon_exchange.sh [MODEL=gpt2-mini] [STEPS=6] [CASES="2:2 2:3 4:3"]
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-gpt2-mini}"; steps="${2:-6}"; cases="${3:-2:2 2:3 4:3}"
cmake --build build --target bench_muon_exchange >/dev/null
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
  "flags: $(grep -m1 flags /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_tile' | tr '\n' ' ')"
echo "| model | stage | ranks | exchange | split matrices | NS5 runs per rank per step |" \
  "elements sent per rank per step | NS5 ms | exchange ms | step() ms | step's added peak MiB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for case in $cases; do
  ranks="${case%%:*}"; stage="${case##*:}"
  mpirun --allow-run-as-root --oversubscribe -n "$ranks" build/bench/bench_muon_exchange \
    --model "$model" --stage "$stage" --steps "$steps" 2>/dev/null | grep -E '^\||^same'
done
