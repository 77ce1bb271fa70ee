#!/usr/bin/env bash
# Model FLOP/s of a Llama-family model against GPT-2 of the same parameter count on CPU ranks
# (docs/benchmarks.md, "Llama against GPT-2"): llama-mini against gpt2-mini by default, zero-train
# on 2 ranks of one thread, micro-batch 2 x 256, no accumulation, AdamW, the same stage and
# dtype for both. Rounds interleave the models (the shared machine's drift hits each alike);
# tokens/s is the median over rounds of each run's median step (the first two left out).
# Model FLOPs per token: 6 x the parameters the step multiplies by (every parameter but GPT-2's
# position table; a tied head once, as it is one matrix) + 12 x layers x seq x attention width
# (scores and weighted values, forward and backward), the PaLM paper's count.
#   bench/llama_vs_gpt2.sh [STAGE=2] [DTYPE=fp32] [STEPS=10] [ROUNDS=2] [MODELS=gpt2-mini,llama-mini]
set -euo pipefail
cd "$(dirname "$0")/.."
stage="${1:-2}"
dtype="${2:-fp32}"
steps="${3:-10}"
rounds="${4:-2}"
models="${5:-gpt2-mini,llama-mini}"
seq=256
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$work/config.json" "$stage" "$dtype" <<'PY'
import json, sys
path, stage, dtype = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
     "gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}},
     "zero_optimization": {"stage": stage}}
if dtype in ("bf16", "fp16"):
    c[dtype] = {"enabled": True}
elif dtype != "fp32":
    sys.exit(f"unknown dtype {dtype}: allowed fp32, bf16, fp16")
json.dump(c, open(path, "w"))
PY
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
     "flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -oE 'avx2|avx512f|avx512_bf16|avx512_fp16|amx_bf16' | sort -u | tr '\n' ' ')"
IFS=, read -r -a names <<< "$models"
for round in $(seq 1 "$rounds"); do
  for model in "${names[@]}"; do
    out="$work/$model-$round"
    build/bin/zero-run -n 2 -- build/bin/zero-train --config "$work/config.json" --model "$model" \
      --steps "$steps" --seq-len "$seq" --eval-every 0 --eval-batches 1 --sample-tokens 1 \
      --threads 1 --out "$out" > "$out.log" 2>&1 || { cat "$out.log"; exit 1; }
  done
done
python3 - "$work" "$rounds" "$seq" "$stage" "$dtype" "${names[@]}" <<'PY'
import csv, re, statistics, sys
work, rounds, seq, stage, dtype, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6:]
sys.path.insert(0, "bench")
from model_shapes import flops_per_token
rows = []
for name in names:
    rates = []
    for r in range(1, rounds + 1):
        with open(f"{work}/{name}-{r}/metrics.csv") as f:
            steps = [float(row["tokens_per_second"]) for row in csv.DictReader(f)][2:]
        rates.append(statistics.median(steps))
    print(f"{name}: rounds' median tokens/s {', '.join(f'{r:.0f}' for r in rates)}")
    tokens = statistics.median(rates)
    flops = flops_per_token(name, seq)
    rows.append((name, tokens, flops, tokens * flops / 1e9))
print(f"stage {stage}, {dtype}, 2 ranks x 1 thread, micro-batch 2 x {seq}, {rounds} round(s)")
print(f"{'model':<14} {'tokens/s':>9} {'MFLOP/token':>12} {'GFLOP/s':>8}")
for name, tokens, flops, rate in rows:
    print(f"{name:<14} {tokens:>9.0f} {flops / 1e6:>12.1f} {rate:>8.2f}")
if len(rows) == 2:
    print(f"{rows[1][0]} / {rows[0][0]} model FLOP/s: {rows[1][3] / rows[0][3]:.3f}")
PY
