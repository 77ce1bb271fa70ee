#!/usr/bin/env bash
# Resuming zero-train from a checkpoint continues the run exactly (Note [Resuming zero-train]
# in apps/zero-train/main.cpp): on 2 ranks, 8 steps straight against 4 steps saved with
# --save-every 4 and then --resume auto for steps 5..8. Every metrics.csv column a step
# determines (loss, validation loss, learning rate, gradient norm, loss scale, skipped) must
# be the same text in both runs: the CSV prints them at full precision, so this is bitwise.
# Dropout is on, so each rank's random generator must be restored too; a torn last row of
# metrics.csv (a kill mid-write) is dropped on resume. Then: a rerun with
# nothing left to train exits 0, and a --steps below the checkpoint's step is refused.
# MODEL (default gpt2-tiny) is zero-train's --model.
#   check_resume.sh ZERO_TRAIN ZERO_RUN CONFIG WORK_DIR [MODEL]
set -uo pipefail
zero_train="$1"; zero_run="$2"; config="$3"; work="$4"; model="${5:-gpt2-tiny}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
rm -rf "$work"; mkdir -p "$work"
fail() { echo "CHECK FAILED: $*"; exit 1; }
train() {  # LOG ARGS...: zero-train on 2 ranks; prints the log, returns its status
  local log="$1"; shift
  timeout 300 "$zero_run" -n 2 -- "$zero_train" --config "$config" --model "$model" \
    --seq-len 32 --dropout 0.1 --eval-every 4 --eval-batches 2 --sample-tokens 8 "$@" \
    >"$log" 2>&1
  local status=$?
  sed 's/^/    | /' "$log"
  return $status
}
straight="$work/straight"; resumed="$work/resumed"
echo "== 8 steps straight"
train "$work/straight.log" --steps 8 --out "$straight" || fail "the straight run failed"
echo "== 4 steps, saving every 4"
train "$work/first.log" --steps 4 --save-every 4 --out "$resumed" || fail "the first half failed"
grep -q "step 4: saved checkpoint $resumed/checkpoints/global_step4" "$work/first.log" ||
  fail "no 'saved checkpoint' line for step 4"
[ "$(cat "$resumed/checkpoints/latest")" = global_step4 ] || fail "latest does not name global_step4"
# A kill while step 5's row was being written leaves it cut short (no newline): the resumed
# run drops it, says so, and its rows still match the straight run's.
printf '5,10.84' >> "$resumed/metrics.csv"
echo "== resumed for steps 5..8"
train "$work/second.log" --steps 8 --save-every 4 --resume auto --out "$resumed" ||
  fail "the resumed run failed"
grep -q "a last row cut short (the run was killed) dropped" "$work/second.log" ||
  fail "no line about the torn metrics.csv row"
grep -q "resuming from $resumed/checkpoints/global_step4 after step 4: training steps 5..8" \
  "$work/second.log" || fail "no 'resuming from' line"
[ "$(cat "$resumed/checkpoints/latest")" = global_step8 ] || fail "latest does not name global_step8"
# Columns step,loss,val_loss,lr,grad_norm,loss_scale,skipped (the rest are timings).
columns() { tail -n +2 "$1" | cut -d, -f1-7; }
[ "$(columns "$straight/metrics.csv" | wc -l)" -eq 8 ] || fail "the straight run has not 8 rows"
[ "$(columns "$resumed/metrics.csv" | wc -l)" -eq 8 ] || fail "the resumed run has not 8 rows"
if ! diff <(columns "$straight/metrics.csv") <(columns "$resumed/metrics.csv"); then
  fail "the resumed run's metrics differ from the straight run's (< straight, > resumed)"
fi
# The comparison must see full-precision losses, and some learning.
columns "$straight/metrics.csv" | cut -d, -f2 | grep -qE '\.[0-9]{12,}' ||
  fail "metrics.csv losses are not printed at full precision"
grep -q "<svg" "$resumed/loss.svg" || fail "no loss.svg after the resumed run"
echo "== nothing left to train"
train "$work/again.log" --steps 8 --resume auto --out "$resumed" || fail "a rerun of a finished run failed"
grep -q "nothing left to train" "$work/again.log" || fail "no 'nothing left to train' line"
echo "== --resume RUN_DIR finds RUN_DIR/checkpoints"
train "$work/rundir.log" --steps 8 --resume "$resumed" --out "$work/rundir" ||
  fail "--resume with the run directory failed"
grep -q "a run directory; resuming from its checkpoints in $resumed/checkpoints" "$work/rundir.log" ||
  fail "no line naming the run directory's checkpoints"
grep -q "nothing left to train" "$work/rundir.log" || fail "--resume RUN_DIR did not find step 8"
echo "== --steps below the checkpoint"
train "$work/below.log" --steps 3 --resume "$resumed/checkpoints" --out "$work/below"
status=$?
[ "$status" -eq 2 ] || fail "--steps 3 below the checkpoint's step 8: exit $status, expected 2"
grep -q "zero-train: error: cannot resume: --steps 3: the checkpoint .* was saved after step 8" \
  "$work/below.log" || fail "no clear message for --steps below the checkpoint"
[ "$(grep -c "zero-train: error" "$work/below.log")" -eq 1 ] || fail "not exactly one error message"
rm -rf "$resumed/checkpoints"  # 87 MB per checkpoint; the logs and metrics stay
echo "OK: steps 5..8 resumed bitwise (loss, validation loss, lr, grad norm, loss scale)"
