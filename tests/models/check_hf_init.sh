#!/usr/bin/env bash
# Hugging Face GPT-2 directories in (ctest hf_init): make them with transformers, export one of
# zero's checkpoints too (zero-train -> zero-ckpt export: config.json + model.safetensors), and
# run test_gpt2_pretrained at 1 and 2 ranks on all of them; then zero-train --init from the
# export trains. Skipped (exit 77) without Python's transformers.
#   check_hf_init.sh TEST_BINARY ZERO_TRAIN ZERO_RUN ZERO_CKPT MPIEXEC PYTHON WORK_DIR
set -uo pipefail
test_binary="$1"; zero_train="$2"; zero_run="$3"; zero_ckpt="$4"; mpiexec="$5"; python="$6"; work="$7"
source "$(dirname "$0")/../lib/transformers_test.sh"
transformers_test "$python" "$work" safetensors
cat > "$work/config.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "zero_optimization": {"stage": 2}}
JSON
timeout 300 "$zero_run" -n 2 -- "$zero_train" --config "$work/config.json" --model gpt2-tiny \
  --steps 2 --eval-every 0 --eval-batches 1 --seq-len 32 --sample-tokens 4 --save-every 2 \
  --out "$work/run" >"$work/train.log" 2>&1 || { cat "$work/train.log"; fail "zero-train failed"; }
"$zero_ckpt" export "$work/run/checkpoints" --out "$work/export/model.safetensors" >"$work/export.log" 2>&1 ||
  { cat "$work/export.log"; fail "zero-ckpt export failed"; }
"$python" tests/models/make_hf_checkpoints.py "$work/hf" "zero-ckpt export=$work/export" ||
  fail "could not make the Hugging Face directories"
export ZERO_TEST_HF_MANIFEST="$work/hf/manifest.json"
for ranks in 1 2; do
  timeout 600 "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    -x ZERO_TEST_HF_MANIFEST -np "$ranks" "$test_binary" --gtest_color=no >"$work/test-np$ranks.log" 2>&1 ||
    { cat "$work/test-np$ranks.log"; fail "test_gpt2_pretrained at $ranks rank(s)"; }
  grep -E "^\[  (PASSED|SKIPPED) " "$work/test-np$ranks.log" | head -3
done
# zero-train --init from the export: its shape from config.json, and it trains.
timeout 300 "$zero_run" -n 2 -- "$zero_train" --config "$work/config.json" --init "$work/export" \
  --steps 2 --eval-every 0 --eval-batches 1 --seq-len 32 --sample-tokens 4 --out "$work/run-init" \
  >"$work/init.log" 2>&1 || { cat "$work/init.log"; fail "zero-train --init failed"; }
grep -q "starting from the weights of $work/export" "$work/init.log" || { cat "$work/init.log"; fail "no init note"; }
echo "hf_init: ok"
