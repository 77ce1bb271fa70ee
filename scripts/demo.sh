#!/usr/bin/env bash
# Installs what is missing, builds, and trains GPT-2 (gpt2-tiny) with ZeRO stage 2 on 2 ranks
# on the bundled Moby-Dick tokens (about 2-3 minutes on a 2-core machine), then prints the
# summary (memory per rank vs the ZeRO formula, communication, throughput, losses) and a
# generated sample. The run directory (config, metrics.csv, loss.svg) is runs/demo.
# Idempotent. Extra arguments go to zero-train (e.g. --steps 50).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup.sh
BUILD_DIR="${ZERO_BUILD_DIR:-build}"
# Every tool the README names: zero-train, zero-ckpt (zero-run is a script configure copies).
cmake --build "$BUILD_DIR" -j "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" --target zero-train zero-ckpt
RANKS="${ZERO_DEMO_RANKS:-2}"
exec "$BUILD_DIR/bin/zero-run" -n "$RANKS" -- "$BUILD_DIR/bin/zero-train" \
  --config configs/demo.json --model gpt2-tiny --data data/tokens/moby_dick \
  --steps 250 --eval-every 50 --sample-every 125 --seq-len 64 --out runs/demo "$@"
