#!/usr/bin/env bash
# The reshard matrix: a checkpoint saved at N ranks and ZeRO stage s, for every N in {1, 2, 4}
# and s in {0, 1, 2, 3}, loads at M ranks and stage t (two targets per save, with M != N: every
# M and every t appears as a target) and training goes on as it would have: the losses of the
# resumed steps are within 1e-5 relative of the uninterrupted run at (N, s). fp32, AdamW with
# clipping and a warmup schedule, stage 3 with every parameter partitioned; the global batch
# is the same at every world size (reshard_driver.cpp).
#   check_reshard.sh DRIVER WORK_DIR MPIRUN [MPIRUN_ARGS...]
set -uo pipefail
driver="$1"; work="$2"; shift 2
mpirun=("$@")
steps=6
save_at=3
tolerance=1e-5
rm -rf "$work"; mkdir -p "$work"
worlds=(1 2 4)
failures=0
jobs=0
start=$SECONDS

job() {  # RANKS LOG ARGS...: one driver job; on failure prints its log and returns non-zero
  local ranks="$1" log="$2"; shift 2
  jobs=$((jobs + 1))
  if ! timeout 120 "${mpirun[@]}" -np "$ranks" "$driver" "$@" >"$log" 2>&1; then
    echo "FAILED: $ranks rank(s): $driver $*"; sed 's/^/    | /' "$log"
    return 1
  fi
}

# Largest relative difference of steps save_at..steps-1 (file: "STEP LOSS" per line), or
# "missing" when a step is absent from either file.
compare() {  # EXPECTED ACTUAL
  awk -v first="$save_at" -v last="$((steps - 1))" '
    FNR == NR { want[$1] = $2; next }
    { got[$1] = $2 }
    END {
      worst = 0
      for (s = first; s <= last; ++s) {
        if (!(s in want) || !(s in got)) { print "missing"; exit }
        d = got[s] - want[s]; if (d < 0) d = -d
        r = want[s] == 0 ? d : d / (want[s] < 0 ? -want[s] : want[s])
        if (r > worst) worst = r
      }
      printf "%.2e\n", worst
    }' "$1" "$2"
}

printf "%-12s %-12s %-10s %s\n" "saved at" "loaded at" "rel diff" "steps $save_at..$((steps - 1))"
for i in 0 1 2; do
  n=${worlds[$i]}
  for s in 0 1 2 3; do
    name="n${n}-s${s}"
    dir="$work/ckpt-$name"
    straight="$work/straight-$name.txt"
    if ! job "$n" "$work/straight-$name.log" straight --stage "$s" --steps "$steps" \
        --save-at "$save_at" --dir "$dir" --out "$straight"; then
      failures=$((failures + 1)); continue
    fi
    for k in 1 2; do
      m=${worlds[$(((i + k) % 3))]}
      t=$(((s + k) % 4))
      target="n${m}-s${t}"
      resumed="$work/resume-$name-to-$target.txt"
      if ! job "$m" "$work/resume-$name-to-$target.log" resume --stage "$t" --steps "$steps" \
          --dir "$dir" --out "$resumed"; then
        failures=$((failures + 1)); continue
      fi
      worst=$(compare "$straight" "$resumed")
      verdict=ok
      if [ "$worst" = missing ] || ! awk -v w="$worst" -v tol="$tolerance" 'BEGIN { exit !(w <= tol) }'; then
        verdict="FAILED (tolerance $tolerance)"
        failures=$((failures + 1))
      fi
      printf "%-12s %-12s %-10s %s\n" "$n rk, st $s" "$m rk, st $t" "$worst" "$verdict"
      if [ "$verdict" != ok ]; then
        echo "    expected (straight at $n ranks, stage $s):"; sed 's/^/      /' "$straight"
        echo "    resumed:"; sed 's/^/      /' "$resumed"
      fi
    done
  done
done
echo "$jobs jobs in $((SECONDS - start)) s, $failures failure(s)"
[ "$failures" -eq 0 ]
