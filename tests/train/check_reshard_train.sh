#!/usr/bin/env bash
# A zero-train checkpoint reshards (MODEL, default llama-tiny): saved at 2 ranks and ZeRO stage
# 3, resumed at 1 rank at stage 2 and at 4 ranks at stage 1, with the same global batch; the
# resumed steps' losses are within 1e-4 relative of the uninterrupted 2-rank run's (fp32; measured
# bitwise equal, Note [Deterministic reduction], but the bound allows another summation order).
# OPTIMIZER (a JSON optimizer section, default AdamW with lr 3e-3) carries its state through the
# reshard too (Adagrad's sum, Lion's momentum).
#   check_reshard_train.sh ZERO_TRAIN ZERO_RUN WORK_DIR [MODEL] [OPTIMIZER]
set -uo pipefail
zero_train="$1"; zero_run="$2"; work="$3"; model="${4:-llama-tiny}"
optimizer='{"type": "AdamW", "params": {"lr": 3e-3}}'
[ $# -ge 5 ] && optimizer="$5"
cd "$(dirname "$0")/../.." || exit 1
rm -rf "$work"; mkdir -p "$work"
fail() { echo "CHECK FAILED: $*"; exit 1; }
config() {  # STAGE: the config file of that stage
  cat > "$work/stage$1.json" <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
 "optimizer": $optimizer,
 "zero_optimization": {"stage": $1}, "seed": 7}
JSON
  echo "$work/stage$1.json"
}
train() {  # LOG RANKS STAGE ARGS...
  local log="$1" ranks="$2" stage="$3"; shift 3
  timeout 300 "$zero_run" -n "$ranks" -- "$zero_train" --config "$(config "$stage")" \
    --model "$model" --seq-len 32 --eval-every 0 --eval-batches 1 --sample-tokens 2 "$@" \
    >"$log" 2>&1 || { cat "$log"; fail "zero-train ($ranks ranks, stage $stage) failed"; }
}
train "$work/straight.log" 2 3 --steps 6 --out "$work/straight"
train "$work/first.log" 2 3 --steps 3 --save-every 3 --out "$work/saved"
losses() { tail -n +2 "$1/metrics.csv" | cut -d, -f1,2 | awk -F, -v s="$2" '$1 > s'; }
for target in "1 2" "4 1"; do
  read -r ranks stage <<<"$target"
  out="$work/resumed-$ranks"
  cp -r "$work/saved" "$out"
  train "$work/resumed-$ranks.log" "$ranks" "$stage" --steps 6 --resume auto --out "$out"
  grep -q "resuming from" "$work/resumed-$ranks.log" || fail "no resume at $ranks rank(s)"
  paste -d, <(losses "$work/straight" 3) <(losses "$out" 3) |
    awk -F, -v t=1e-4 '{ d = ($2 - $4) / $2; if (d < 0) d = -d; if (d > t) bad = 1;
                         printf "  step %s: %s (straight) %s (resharded), %.1e\n", $1, $2, $4, d }
                       END { exit bad }' ||
    fail "the steps resumed at $ranks rank(s), stage $stage differ from the uninterrupted run"
  [ "$(losses "$out" 3 | wc -l)" -eq 3 ] || fail "not 3 resumed steps at $ranks rank(s)"
  echo "[$ranks rank(s), stage $stage] ok"
done
echo "OK: $model's checkpoint (2 ranks, stage 3; $optimizer) reshards to 1 rank at stage 2 and" \
  "4 at stage 1"
