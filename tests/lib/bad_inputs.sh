# Sourced by the bad-input tests (tests/train/check_bad_inputs.sh, check_disk_full.sh) once
# $work exists: a config that is right ($good_config) and verify_failure.
good_config="$work/good.json"
cat > "$good_config" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 2}}
JSON
# verify_failure NAME STATUS OUTPUT_FILE EXPECTED_SUBSTRING...: exit 2, every expected text,
# no stack dump, no mpirun banner, one error message.
verify_failure() {
  local name="$1" status="$2" out="$3"; shift 3
  local expected=("$@")
  local ok=1
  if [ "$status" != 2 ]; then ok=0; echo "[$name] exit status $status (expected 2: a bad input, every rank ended)"; fi
  for e in "${expected[@]}"; do
    grep -qF -- "$e" "$out" || { ok=0; echo "[$name] message lacks '$e'"; }
  done
  if grep -qiE "terminate called|stack trace|backtrace|Exception raised from|frame #" "$out"; then
    ok=0; echo "[$name] stack dump in the output"
  fi
  # zero-run passes --quiet: our one line, not mpirun's banner about the failed job.
  if grep -qE "Primary job|mpirun detected" "$out"; then
    ok=0; echo "[$name] mpirun's failure banner in the output"
  fi
  local messages
  messages=$(grep -c "zero-train: error" "$out")
  if [ "$messages" -gt 1 ]; then ok=0; echo "[$name] $messages error messages, expected one"; fi
  if [ "$ok" -eq 1 ]; then echo "[$name] ok (exit $status): $(grep -m1 -iE 'error' "$out")"; else
    failures=$((failures + 1)); sed 's/^/    | /' "$out"; fi
}
