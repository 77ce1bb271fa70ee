#!/usr/bin/env bash
# zero-train on a full disk: one message naming the file and ENOSPC, exit 2, nothing lost.
# Skipped (exit 77) where no private mount namespace can be made.
#   check_disk_full.sh ZERO_TRAIN ZERO_RUN WORK_DIR
set -uo pipefail
zero_train="$1"; zero_run="$2"; work="$3"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
rm -rf "$work"; mkdir -p "$work"
cd "$repo"
source "$repo/tests/lib/bad_inputs.sh"  # $good_config, verify_failure
failures=0
# A full disk (a 200 MiB file system of the job's own: tmpfs in a private mount namespace, so
# no privilege is needed; one checkpoint of this model at 2 ranks is 88 MB).
# - Run 1 saves step 1. Run 2 resumes and saves steps 2 and 3: the start-up check passes (one
#   checkpoint fits), step 2's save fits, step 3's runs out of space while the rank files are
#   written: one message naming the file and ENOSPC, exit 2, no .tmp- directory left, `latest`
#   still global_step2, every metrics.csv row (steps 1-3) kept.
# - Run 3 resumes again: the start-up check finds no room for a checkpoint and refuses before
#   training, naming the free and needed bytes.
disk="$work/small-disk"; mkdir -p "$disk"
if unshare -rm mount -t tmpfs -o size=1m tmpfs "$disk" 2>/dev/null; then
  unshare -rm bash -c '
    disk="$1" zero_run="$2" zero_train="$3" config="$4" out="$5"
    mount -t tmpfs -o size=200m tmpfs "$disk" || exit 1
    train() { timeout 120 "$zero_run" -n 2 -- "$zero_train" --config "$config" --save-every 1 \
                --resume auto --out "$disk/run" "$@"; }
    train --steps 1 >"$out.first" 2>&1 || { echo "first run failed" >"$out"; exit 0; }
    train --steps 3 >"$out" 2>&1
    echo $? >"$out.status"
    ls -A "$disk/run/checkpoints" >"$out.listing"
    cat "$disk/run/checkpoints/latest" >"$out.latest"
    grep -c "^[123]," "$disk/run/metrics.csv" >"$out.rows"
    train --steps 4 >"$out.third" 2>&1
    echo $? >"$out.third.status"
  ' _ "$disk" "$zero_run" "$zero_train" "$good_config" "$work/disk_full.out"
  verify_failure disk_full "$(cat "$work/disk_full.out.status" 2>/dev/null || echo none)" \
    "$work/disk_full.out" ".safetensors.tmp': No space left on device"
  if grep -q "^\.tmp-" "$work/disk_full.out.listing" 2>/dev/null || \
     [ "$(cat "$work/disk_full.out.latest" 2>/dev/null)" != "global_step2" ] || \
     [ "$(cat "$work/disk_full.out.rows" 2>/dev/null)" != "3" ]; then
    echo "[disk_full] left a .tmp- directory, lost latest or lost metrics rows:"
    cat "$work/disk_full.out.listing" "$work/disk_full.out.latest" "$work/disk_full.out.rows" 2>&1 | sed 's/^/    | /'
    failures=$((failures + 1))
  fi
  verify_failure disk_full_at_start "$(cat "$work/disk_full.out.third.status" 2>/dev/null || echo none)" \
    "$work/disk_full.out.third" "MiB) free on its file system, but a checkpoint needs about"
  if grep -q "^step 4/" "$work/disk_full.out.third" 2>/dev/null; then
    echo "[disk_full_at_start] trained before refusing"; failures=$((failures + 1))
  fi
else
  echo "SKIPPED: this machine allows no private mount namespace (unshare -rm)"; exit 77
fi
if pgrep -f "^$zero_train .*--out $work/" >/dev/null; then
  echo "ranks left running:"; pgrep -af "^$zero_train .*--out $work/"; failures=$((failures + 1))
fi
echo "$failures failing case(s)"
[ "$failures" -eq 0 ]
