#!/usr/bin/env bash
# A stopped rank ends the job (Note [Collective timeout], src/comm/collective_watchdog.h):
# SIGSTOP to rank 1 mid-training leaves rank 0 waiting inside a collective; with
# ZERO_COLLECTIVE_TIMEOUT_S=5 the job ends within the deadline (plus a margin for a loaded
# machine), with exit status 3, a message naming the operation and rank 1, and no rank left.
#   check_collective_timeout.sh ZERO_TRAIN ZERO_RUN CONFIG OUT_DIR
set -uo pipefail
zero_train="$1"; zero_run="$2"; config="$3"; out="$4"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
rm -rf "$out"
deadline=5
ZERO_COLLECTIVE_TIMEOUT_S=$deadline "$zero_run" -n 2 -- "$zero_train" --config "$config" \
  --steps 100000 --seq-len 32 --eval-every 0 --out "$out" >"$out.log" 2>&1 &
launcher=$!
ranks() { pgrep -f "^$zero_train .*--out $out( |\$)"; }
cleanup() { for pid in $(ranks); do kill -CONT "$pid"; kill -KILL "$pid"; done 2>/dev/null; }
for _ in $(seq 1 240); do  # wait for training to be under way (two CSV rows)
  [ -f "$out/metrics.csv" ] && [ "$(wc -l < "$out/metrics.csv")" -ge 3 ] && break
  sleep 0.5
done
[ -f "$out/metrics.csv" ] || { echo "training never started"; cat "$out.log"; kill -TERM "$launcher"; exit 1; }
rank1=""
for pid in $(ranks); do
  if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then rank1=$pid; fi
done
[ -n "$rank1" ] || { echo "rank 1 not found"; cleanup; exit 1; }
kill -STOP "$rank1"
start=$(date +%s%N)
limit=$((deadline + 25))
for _ in $(seq 1 $((limit * 10))); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$launcher" 2>/dev/null; then
  echo "the job still runs $limit s after rank 1 stopped (deadline $deadline s)"; cat "$out.log"
  cleanup; kill -KILL "$launcher"; exit 1
fi
wait "$launcher"; status=$?
elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
sleep 1
failed=0
if [ -n "$(ranks)" ]; then echo "ranks left running:"; pgrep -af "^$zero_train .*--out $out( |\$)"; cleanup; failed=1; fi
[ "$status" -eq 3 ] || { echo "exit status $status, expected 3 (collective timeout)"; failed=1; }
for expected in "zero: collective timeout on rank 0 of 2" "past the deadline of $deadline s"; do
  grep -qF "$expected" "$out.log" || { echo "the output lacks '$expected'"; failed=1; }
done
# Rank 1 stopped before the collective ("waiting for rank 1 (entered N collectives, silent for
# S s)") or inside it ("rank 1 entered it too but has been silent for S s"): named either way.
grep -qE "rank 0 of 2: .*rank 1 .*silent for [0-9]+ s" "$out.log" ||
  { echo "the output does not name rank 1 as silent"; failed=1; }
if [ "$failed" -ne 0 ]; then sed 's/^/    | /' "$out.log"; exit 1; fi
echo "OK: the job ended ${elapsed} ms after rank 1 stopped (deadline $deadline s), exit status 3:"
grep -F "collective timeout" "$out.log"
