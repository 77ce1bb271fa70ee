#!/usr/bin/env bash
# End-to-end: zero-train on 2 ranks for a few steps with the given config; exits 0, loss
# decreases, the CSV and the plot exist, samples are printed (mid-run and at the end: at stage 3
# sampling is a collective forward), and the summary's memory figures equal the formula.
#   check_train.sh ZERO_TRAIN ZERO_RUN CONFIG OUT_DIR STEPS [--expect-formula | --runs-only]
#                  [--expect-line TEXT]...
# --runs-only: the run must succeed and write its outputs; the loss is not required to fall
# (for configs with tiny learning rates, like DeepSpeed's example).
# --expect-line TEXT: the log has a line containing TEXT (may be repeated).
set -euo pipefail
zero_train="$1"; zero_run="$2"; config="$3"; out="$4"; steps="$5"; shift 5
expect_formula=""
expected_lines=()
while [ $# -gt 0 ]; do
  case "$1" in
    --expect-formula|--runs-only) expect_formula="$1"; shift ;;
    --expect-line) expected_lines+=("$2"); shift 2 ;;
    *) echo "check_train.sh: unknown option $1"; exit 2 ;;
  esac
done
repo="$(cd "$(dirname "$0")/../.." && pwd)"
rm -rf "$out"
log="$out.log"
cd "$repo"
timeout 600 "$zero_run" -n 2 -- "$zero_train" --config "$config" --model gpt2-tiny \
  --steps "$steps" --eval-every 10 --eval-batches 2 --seq-len 64 --sample-every 10 \
  --sample-tokens 16 --out "$out" >"$log" 2>&1 || {
  echo "zero-train failed:"; cat "$log"; exit 1; }
cat "$log"
fail() { echo "CHECK FAILED: $*"; exit 1; }
[ -s "$out/metrics.csv" ] || fail "no metrics.csv"
[ -s "$out/loss.svg" ] || fail "no loss.svg"
grep -q "<svg" "$out/loss.svg" || fail "loss.svg is not an SVG"
[ -s "$out/config.json" ] || fail "no config.json"
rows=$(($(wc -l < "$out/metrics.csv") - 1))
[ "$rows" -eq "$steps" ] || fail "metrics.csv has $rows rows, expected $steps"
first=$(sed -n 2p "$out/metrics.csv" | cut -d, -f2)
last=$(tail -n 1 "$out/metrics.csv" | cut -d, -f2)
if [ "$expect_formula" != "--runs-only" ]; then
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.3) }' || fail "loss did not decrease: $first -> $last"
fi
grep -q "^summary" "$log" || fail "no summary"
for line in "${expected_lines[@]}"; do
  grep -qF -- "$line" "$log" || fail "no line containing '$line'"
done
samples=$(grep -c "^sample: " "$log" || true)
expected_samples=$(( (steps - 1) / 10 + 1 ))  # every 10 steps but the last, and at the end
[ "$samples" -eq "$expected_samples" ] || fail "$samples samples printed, expected $expected_samples"
if [ "$expect_formula" = "--expect-formula" ]; then
  # "model state, rank R  MEASURED  EXPECTED (ZeRO-S: ...)": measured equals the formula.
  for r in 0 1; do
    line=$(grep "model state, rank $r " "$log") || fail "no model-state line for rank $r"
    measured=$(echo "$line" | sed -E 's/^ *model state, rank [0-9]+ +([0-9.]+ [KMGT]?i?B) +.*/\1/')
    expected=$(echo "$line" | sed -E 's/.* ([0-9.]+ [KMGT]?i?B) \(ZeRO-.*/\1/')
    [ "$measured" = "$expected" ] || fail "rank $r model state $measured != formula $expected"
  done
  if grep -q "(ZeRO-3:" "$log"; then
    # Stage 3: units were really partitioned (something was gathered), and the
    # communication breakdown is there.
    line=$(grep "gathered params, peak" "$log") || fail "no gathered-params line at stage 3"
    echo "$line" | grep -Eq "peak +0 B " && fail "nothing gathered at stage 3: $line"
    grep -q "  all-gather " "$log" || fail "no all-gather line at stage 3"
  fi
fi
echo "OK"
