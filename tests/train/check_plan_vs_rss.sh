#!/usr/bin/env bash
# The memory plan against the resident set of the whole run (training, evaluation, samples):
# zero-train on 2 ranks, and every rank's peak RSS (VmHWM, as the summary prints it) within
# 5 % of that rank's plan, for
#   - the demo (configs/demo.json, gpt2-tiny, bf16 or fp32 as "auto" decides) with evaluation
#     and mid-run samples, as scripts/demo.sh runs it but fewer steps;
#   - fp32 at stage 3 (gathered units, persistent parameters);
#   - bf16 at stage 3 with the optimizer state and the parameters on NVMe (a directory of the
#     test's);
#   - llama-tiny (zero/llama.h) as the demo, in fp32 at stage 3, and computing in bf16 at stage 2
#     (ATen's bf16 GEMMs where the CPU has bf16 arithmetic, else half_gemm's fp32 path).
# The summary's "baseline + tracked peak" row is printed with each failure, to place the gap.
#   check_plan_vs_rss.sh ZERO_TRAIN ZERO_RUN WORK_DIR
set -uo pipefail
zero_train="$1"; zero_run="$2"; work="$3"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
rm -rf "$work"; mkdir -p "$work/swap"
cd "$repo"
cat >"$work/fp32-stage3.json" <<'JSON'
{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 8, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.1}},
 "zero_optimization": {"stage": 3, "reduce_bucket_size": 2e6,
                       "stage3_param_persistence_threshold": 1000}, "seed": 1234}
JSON
cat >"$work/nvme.json" <<JSON
{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 8, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002}},
 "bf16": {"enabled": true},
 "zero_optimization": {"stage": 3,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$work/swap"},
   "offload_param": {"device": "nvme", "nvme_path": "$work/swap"}}, "seed": 1234}
JSON
cat >"$work/bf16-stage2.json" <<'JSON'
{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 8, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002}}, "bf16": {"enabled": true},
 "compute_data_type": "bf16", "zero_optimization": {"stage": 2}, "seed": 1234}
JSON
limit=5.0  # percent, either way
failures=0
run() {  # [model=MODEL] run NAME CONFIG STEPS EXTRA_ARGS... (MODEL: gpt2-tiny)
  local name="$1" config="$2" steps="$3"; shift 3
  local model="${model:-gpt2-tiny}"
  local log="$work/$name.log"
  if ! timeout 280 "$zero_run" -n 2 -- "$zero_train" --config "$config" --model "$model" \
      --data data/tokens/moby_dick --seq-len 64 --steps "$steps" --out "$work/run-$name" "$@" \
      >"$log" 2>&1; then
    echo "[$name] zero-train failed:"; sed 's/^/    | /' "$log"; failures=$((failures + 1)); return
  fi
  # "  peak RSS, rank R   445.8 MiB  planned 434.2 MiB: +2.7 %"
  local rows
  rows=$(grep -E "^ +peak RSS, rank [0-9]+ " "$log")
  if [ "$(grep -c . <<<"$rows")" -ne 2 ] || ! grep -q "^sample: " "$log"; then
    echo "[$name] the summary lacks a peak RSS row per rank, or no sample was printed:"
    sed 's/^/    | /' "$log"; failures=$((failures + 1)); return
  fi
  while read -r row; do
    local off
    off=$(sed -nE 's/.*planned .*: ([+-][0-9.]+) %.*/\1/p' <<<"$row")
    if [ -z "$off" ] || awk -v d="$off" -v l="$limit" 'BEGIN { exit !(d > l || d < -l) }'; then
      echo "[$name] beyond ${limit} %: $row"
      grep -A1 -F "$row" "$log" | tail -1 | sed 's/^/    /'
      failures=$((failures + 1))
    else
      echo "[$name] ok: $row"
    fi
  done <<<"$rows"
}
run demo configs/demo.json 30 --eval-every 10 --sample-every 15
run fp32-stage3 "$work/fp32-stage3.json" 20 --eval-every 10 --sample-every 10
run nvme "$work/nvme.json" 10 --eval-every 5 --sample-every 5
model=llama-tiny run llama-demo configs/demo.json 30 --eval-every 10 --sample-every 15
model=llama-tiny run llama-fp32-stage3 "$work/fp32-stage3.json" 20 --eval-every 10 --sample-every 10
model=llama-tiny run llama-bf16 "$work/bf16-stage2.json" 10 --eval-every 5 --sample-every 5
echo "$failures failing case(s)"
[ "$failures" -eq 0 ]
