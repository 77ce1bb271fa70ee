#!/usr/bin/env bash
# Installs what is missing, builds, and trains a small GPT-2 with ZeRO stage 2 on 2 MPI ranks.
# Idempotent. (The full training job with real data, zero-train, replaces this example next.)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup.sh
BUILD_DIR="${ZERO_BUILD_DIR:-build}"
cmake --build "$BUILD_DIR" -j "$(nproc)" --target train_minimal
RANKS="${ZERO_DEMO_RANKS:-2}"
exec mpirun --allow-run-as-root --oversubscribe -np "$RANKS" -x OMP_WAIT_POLICY \
  "$BUILD_DIR/examples/train_minimal" "$@"
