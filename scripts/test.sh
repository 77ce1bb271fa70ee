#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite: ctest, then the build against
# the oldest supported libtorch (scripts/torch-compat.sh; ZERO_TORCH_COMPAT=0 skips it locally),
# then the sanitizer and fuzzing runs (scripts/sanitize.sh; ZERO_SANITIZERS=0 skips them
# locally). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup.sh
BUILD_DIR="${ZERO_BUILD_DIR:-build}"
cmake --build "$BUILD_DIR" -j "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
(cd "$BUILD_DIR" && ctest --output-on-failure --timeout 900 "$@")
if [ "${ZERO_TORCH_COMPAT:-1}" != 0 ]; then
  scripts/torch-compat.sh  # the libraries against the oldest supported libtorch
fi
if [ "${ZERO_SANITIZERS:-1}" != 0 ]; then
  scripts/sanitize.sh
fi
