#!/usr/bin/env bash
# Ctrl-C stops every rank: SIGINT to zero-run (mpirun after exec) mid-training ends the job
# promptly, with a non-zero status and no rank left running.
#   check_interrupt.sh ZERO_TRAIN ZERO_RUN CONFIG OUT_DIR
set -uo pipefail
zero_train="$1"; zero_run="$2"; config="$3"; out="$4"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
rm -rf "$out"
"$zero_run" -n 2 -- "$zero_train" --config "$config" --steps 100000 --seq-len 32 \
  --eval-every 0 --out "$out" >"$out.log" 2>&1 &
launcher=$!
for _ in $(seq 1 240); do  # wait for training to be under way (two CSV rows)
  [ -f "$out/metrics.csv" ] && [ "$(wc -l < "$out/metrics.csv")" -ge 3 ] && break
  sleep 0.5
done
[ -f "$out/metrics.csv" ] || { echo "training never started"; cat "$out.log"; kill -TERM "$launcher"; exit 1; }
kill -INT "$launcher"
for _ in $(seq 1 60); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.5; done
if kill -0 "$launcher" 2>/dev/null; then echo "zero-run still running 30 s after SIGINT"; kill -KILL "$launcher"; exit 1; fi
wait "$launcher"; status=$?
sleep 1
# Only this job's ranks (other tests may run zero-train at the same time under ctest -j).
if pgrep -f "^$zero_train .*--out $out( |\$)" >/dev/null; then
  echo "ranks left running:"; pgrep -af "^$zero_train .*--out $out( |\$)"; exit 1
fi
[ "$status" -ne 0 ] || { echo "interrupted job exited 0"; exit 1; }
echo "OK: stopped after $(($(wc -l < "$out/metrics.csv") - 1)) steps, exit status $status, no rank left"
