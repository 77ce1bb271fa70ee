#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (ctest). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup.sh
BUILD_DIR="${ZERO_BUILD_DIR:-build}"
cmake --build "$BUILD_DIR" -j "$(nproc)"
cd "$BUILD_DIR"
ctest --output-on-failure --timeout 900 "$@"
