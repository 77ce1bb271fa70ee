#!/usr/bin/env bash
# zero's CPU optimizer loop against DeepSpeed's own CPU op (docs/benchmarks.md, "NVMe offload"
# and "Adagrad and Lion"): AdamW (cpu_adam), Adagrad (cpu_adagrad) or Lion (cpu_lion) on the
# same tensor sizes and thread count, the two alternated ROUNDS times so that machine noise
# hits both alike. Prints each run's elements/s and the medians.
#   bench/optimizer_vs_deepspeed.sh [NUMEL=5e7] [THREADS=2] [ROUNDS=5] [STEPS=20] [DTYPE=fp32]
#                                   [OPTIMIZER=adamw|adagrad|lion]
# DTYPE fp32: fp32 parameters and gradients on both sides. bf16: DeepSpeed steps a bf16
# parameter with a bf16 gradient (no fp32 master: 22 bytes moved per element); zero its usual
# mixed-precision step, an fp32 master with a bf16 gradient and a bf16 copy written (30 bytes).
# Needs deepspeed==0.19.8 (pip; its cpu_adam op is JIT-built on the first run) and
# `cmake --build build --target bench_offload`.
set -euo pipefail
cd "$(dirname "$0")/.."
numel="$(python3 -c "print(int(float('${1:-5e7}')))")"
threads="${2:-2}"
rounds="${3:-5}"
steps="${4:-20}"
dtype="${5:-fp32}"
optimizer="${6:-adamw}"
ds_optimizer="${optimizer/adamw/adam}"
source scripts/env.sh
zero_args=(--numel "$numel" --rounds "$steps" --threads "$threads" --optimizer "$optimizer")
[ "$dtype" = bf16 ] && zero_args+=(--grad-dtype bf16 --param-dtype bf16)
rate() { grep -o "elements_per_s=[^ ]*" | cut -d= -f2; }
ds=() zero=()
for ((r = 1; r <= rounds; r++)); do
  d="$(python3 bench/deepspeed_cpu_adam.py --numel "$numel" --steps "$steps" --threads "$threads" \
        --dtype "$dtype" --optimizer "$ds_optimizer" 2>/dev/null | grep "^deepspeed_cpu_" | rate)"
  # --bind-to none: mpirun binds a single rank to one core by default.
  z="$(mpirun --allow-run-as-root --bind-to none -np 1 build/bench/bench_offload optimizer \
        "${zero_args[@]}" 2>/dev/null | grep "^zero_shard_optimizer" | rate)"
  echo "round $r: deepspeed $d zero $z elements/s"
  ds+=("$d") zero+=("$z")
done
python3 - "${ds[*]}" "${zero[*]}" <<'PY'
import statistics, sys
ds = [float(x) for x in sys.argv[1].split()]
zero = [float(x) for x in sys.argv[2].split()]
d, z = statistics.median(ds), statistics.median(zero)
print(f"median: deepspeed {d:.3g} zero {z:.3g} elements/s; zero/deepspeed {z / d:.2f}")
PY
