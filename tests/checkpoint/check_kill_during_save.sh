#!/usr/bin/env bash
# SIGKILL of one rank while zero-train saves a checkpoint (Note [Checkpoint format]: ranks
# write into DIR/.tmp-TAG, `latest` is replaced last): `latest` still names the previous
# checkpoint, the interrupted one is not named by it, and the previous one loads — a run
# resumed from it trains the next step to bitwise the loss the killed run had logged for it,
# and its own save clears the leftover temporary directory.
#
# zero-train (gpt2-mini, 2 ranks) saves after every step; once the first checkpoint is
# complete, the script polls for a .tmp- directory and kills one rank while it exists (rank 1,
# then rank 0 on the next attempt, ...). If the save finishes before the kill lands, it tries
# again; after several attempts that never catch a save in progress it skips (exit 77).
#   check_kill_during_save.sh ZERO_TRAIN ZERO_RUN WORK_DIR
set -uo pipefail
zero_train="$1"; zero_run="$2"; work="$3"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
rm -rf "$work"; mkdir -p "$work"
config="$work/config.json"
cat > "$config" <<'JSON'
{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
 "bf16": {"enabled": true}, "zero_optimization": {"stage": 2}}
JSON
common=(--config "$config" --model gpt2-mini --seq-len 16 --eval-every 0 --eval-batches 1
        --sample-tokens 4 --save-every 1)
fail() { echo "CHECK FAILED: $*"; exit 1; }
ranks_of() { pgrep -f "^$zero_train .*--out $1( |\$)"; }
rank_of_pid() { tr '\0' '\n' < "/proc/$1/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p'; }
# Stops what this script started and is still running (by pid), then fails.
give_up() {  # LAUNCHER OUT MESSAGE
  kill -KILL "$1" 2>/dev/null
  for pid in $(ranks_of "$2"); do kill -KILL "$pid" 2>/dev/null; done
  fail "$3"
}

attempts=4
for attempt in $(seq 1 "$attempts"); do
  victim_rank=$((attempt % 2))
  out="$work/run$attempt"; ckpt="$out/checkpoints"; log="$work/run$attempt.log"
  echo "== attempt $attempt: killing rank $victim_rank during a save"
  "$zero_run" -n 2 -- "$zero_train" "${common[@]}" --steps 100000 --out "$out" >"$log" 2>&1 &
  launcher=$!
  # 1. The first checkpoint completes.
  deadline=$((SECONDS + 300))
  until [ -f "$ckpt/latest" ]; do
    kill -0 "$launcher" 2>/dev/null || { cat "$log"; fail "zero-train exited before its first checkpoint"; }
    [ "$SECONDS" -lt "$deadline" ] || { cat "$log"; give_up "$launcher" "$out" "no checkpoint after 300 s"; }
    sleep 0.2
  done
  # 2. A later save is in progress: kill one rank.
  caught=""
  deadline=$((SECONDS + 120))
  while [ "$SECONDS" -lt "$deadline" ]; do
    for tmp in "$ckpt"/.tmp-*; do
      [ -d "$tmp" ] || continue
      previous=$(cat "$ckpt/latest")
      [ ".tmp-$previous" = "$(basename "$tmp")" ] && continue  # cannot be: latest is written last
      victim=""
      for pid in $(ranks_of "$out"); do
        [ "$(rank_of_pid "$pid")" = "$victim_rank" ] && victim=$pid
      done
      [ -n "$victim" ] || continue
      kill -KILL "$victim" && caught="$(basename "$tmp")"
      break
    done
    [ -n "$caught" ] && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.02
  done
  [ -n "$caught" ] || give_up "$launcher" "$out" "no save in progress seen within 120 s"
  tag="${caught#.tmp-}"
  # 3. mpirun ends the job; no rank is left.
  for _ in $(seq 1 120); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$launcher" 2>/dev/null && give_up "$launcher" "$out" "the job still runs 60 s after the kill"
  wait "$launcher"; status=$?
  sleep 1
  [ -z "$(ranks_of "$out")" ] || give_up "$launcher" "$out" "ranks left running after the kill"
  [ "$status" -ne 0 ] || fail "the killed job exited 0"
  latest=$(cat "$ckpt/latest")
  if [ "$latest" = "$tag" ]; then
    echo "   the save of $tag finished before the kill landed (latest names it); trying again"
    rm -rf "$ckpt"  # 360 MB per checkpoint
    continue
  fi
  echo "   killed rank $victim_rank (pid $victim) while $caught existed; job exit status $status"
  # 4. latest names the previous checkpoint, complete; the interrupted one is not named.
  [ "$latest" = "$previous" ] || fail "latest names '$latest', expected the previous checkpoint '$previous'"
  [ -f "$ckpt/$latest/metadata.json" ] || fail "the checkpoint latest names has no metadata.json"
  if [ -d "$ckpt/$caught" ]; then state="left as $caught"
  elif [ -f "$ckpt/$tag/metadata.json" ]; then state="renamed to $tag (killed before latest was replaced)"
  else fail "the interrupted checkpoint $tag vanished"; fi
  echo "   latest: $latest (previous, complete); interrupted $tag: $state"
  # 5. It loads: the resumed run trains the next step to the loss the killed run logged.
  step=${latest#global_step}
  next=$((step + 1))
  logged=$(awk -F, -v s="$next" '$1 == s { print $2 }' "$out/metrics.csv")
  [ -n "$logged" ] || fail "the killed run's metrics.csv has no row for step $next"
  resume_log="$work/resume$attempt.log"
  if ! timeout 300 "$zero_run" -n 2 -- "$zero_train" "${common[@]}" --steps "$next" \
      --resume auto --out "$out" >"$resume_log" 2>&1; then
    cat "$resume_log"; fail "resuming from $latest failed"
  fi
  grep -q "resuming from $ckpt/$latest after step $step" "$resume_log" ||
    { cat "$resume_log"; fail "no 'resuming from' line"; }
  resumed=$(awk -F, -v s="$next" '$1 == s { print $2 }' "$out/metrics.csv")
  [ "$resumed" = "$logged" ] || fail "step $next: resumed loss $resumed, the killed run logged $logged"
  [ "$(cat "$ckpt/latest")" = "global_step$next" ] || fail "the resumed run's save is not latest"
  [ ! -e "$ckpt/.tmp-global_step$next" ] || fail "the leftover .tmp-global_step$next was not cleared"
  echo "OK: latest stayed $latest through the kill; resumed step $next loss $resumed (bitwise as logged)"
  rm -rf "$ckpt"  # 360 MB per checkpoint; the logs stay
  exit 0
done
echo "SKIPPED: in $attempts attempts every save finished before the kill landed (saves too fast here)"
exit 77
