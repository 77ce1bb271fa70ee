#!/usr/bin/env bash
# tests/lib/skip_report.py on made-up ctest results (Note [Skipped tests are counted]): GPU
# skips pass in strict mode; any other skip passes only without it; a test skipped for its rank
# count passes when it ran at another and fails when the other entry ran without it.
#   check_skip_report.sh BUILD_DIR WORK_DIR
set -uo pipefail
build="$1"; work="$2"
report="$(dirname "$0")/skip_report.py"
rm -rf "$work"; mkdir -p "$work"
failures=0
junit() {  # FILE then "NAME STATUS [SKIP_MESSAGE]" lines on stdin
  { echo '<?xml version="1.0" encoding="UTF-8"?><testsuite>'
    while read -r name status output; do
      echo "<testcase name=\"$name\" status=\"$status\">"
      [ "$status" = notrun ] && echo '<skipped message="SKIP_RETURN_CODE=77"/>'
      echo "<system-out>$output</system-out></testcase>"
    done
    echo '</testsuite>'; } >"$1"
}
expect() {  # NAME WANTED_STATUS DIR [--strict]
  local name="$1" wanted="$2" dir="$3"; shift 3
  python3 "$report" "$build" "$dir/ctest.xml" "$dir" "$@" >"$dir/out" 2>&1
  local got=$?
  if [ "$got" = "$wanted" ]; then echo "[$name] ok (exit $got)"; else
    echo "[$name] exit $got, expected $wanted:"; sed 's/^/    | /' "$dir/out"; failures=$((failures + 1)); fi
}
mkdir -p "$work/gpu" "$work/env" "$work/ranks-ok" "$work/ranks-missing"
junit "$work/gpu/ctest.xml" <<'X'
test_cuda notrun SKIPPED: all 7 test(s): no CUDA device
test_crc32c run ok
X
expect gpu_only_strict 0 "$work/gpu" --strict
junit "$work/env/ctest.xml" <<'X'
encoder_vs_tiktoken notrun SKIPPED: the tiktoken package is not installed
X
expect environment_skip 0 "$work/env"
expect environment_skip_strict 1 "$work/env" --strict
junit "$work/ranks-ok/ctest.xml" <<'X'
test_engine run ok
test_engine_np2 run ok
X
printf 'skipped\tA.B\t[rank count] needs two ranks\n' >"$work/ranks-ok/test_engine.np1.tsv"
printf 'ran\tA.B\t\n' >"$work/ranks-ok/test_engine.np2.tsv"
expect rank_count_ran_elsewhere 0 "$work/ranks-ok" --strict
cp "$work/ranks-ok/ctest.xml" "$work/ranks-missing/ctest.xml"
printf 'skipped\tA.B\t[rank count] needs two ranks\n' >"$work/ranks-missing/test_engine.np1.tsv"
printf 'skipped\tA.B\t[rank count] needs two ranks\n' >"$work/ranks-missing/test_engine.np2.tsv"
expect rank_count_ran_nowhere 1 "$work/ranks-missing"
grep -q "ERROR test_engine A.B" "$work/ranks-missing/out" || { echo "[rank_count_ran_nowhere] no ERROR line"; failures=$((failures + 1)); }
echo "$failures failing case(s)"
[ "$failures" -eq 0 ]
