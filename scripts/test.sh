#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite: ctest, then the build against
# the oldest supported libtorch (scripts/torch-compat.sh; ZERO_TORCH_COMPAT=0 skips it locally),
# then the sanitizer and fuzzing runs (scripts/sanitize.sh; ZERO_SANITIZERS=0 skips them
# locally). Idempotent.
#
# After ctest it lists every test that was skipped and why (tests/lib/skip_report.py). In CI
# (CI=true, or ZERO_REQUIRE_ALL_TESTS=1; .ci/run sets it) setup must install every optional
# dependency, and any skip but the GPU tests' fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
strict=()
if [ "${CI:-}" = true ] || [ "${ZERO_REQUIRE_ALL_TESTS:-0}" = 1 ]; then
  export ZERO_REQUIRE_ALL_TESTS=1
  strict=(--strict)
fi
scripts/setup.sh
BUILD_DIR="${ZERO_BUILD_DIR:-build}"
cmake --build "$BUILD_DIR" -j "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
# Note [Skipped tests are counted] (tests/test_main.cpp): each GoogleTest process records its
# tests here; ctest's JUnit file holds the entries that did not run.
records="$(cd "$BUILD_DIR" && pwd)/test-records"
rm -rf "$records"; mkdir -p "$records"
status=0
(cd "$BUILD_DIR" && ZERO_TEST_RECORD_DIR="$records" \
   ctest --output-on-failure --timeout 900 --output-junit "$records/ctest.xml" "$@") || status=$?
if [ -f "$records/ctest.xml" ]; then
  python3 tests/lib/skip_report.py "$BUILD_DIR" "$records/ctest.xml" "$records" "${strict[@]}" ||
    status=1
fi
[ "$status" -eq 0 ] || exit "$status"
if [ "${ZERO_TORCH_COMPAT:-1}" != 0 ]; then
  scripts/torch-compat.sh  # the libraries against the oldest supported libtorch
fi
if [ "${ZERO_SANITIZERS:-1}" != 0 ]; then
  scripts/sanitize.sh
fi
