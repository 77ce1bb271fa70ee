#!/usr/bin/env bash
# Prepares the Python peers (setup.sh: venv, deepspeed, its CPU ops), then runs the benchmark
# driver with the given options, e.g.
#   bench/peers/run.sh --model gpt2-mini --dtypes fp32,bf16 --rounds 3 --bf16-rounds 1 --bf16-steps 2
# Results: build/peers-results/report.md (or --out DIR).
set -euo pipefail
cd "$(dirname "$0")/../.."
unset OPENBLAS_CORETYPE
export OMP_WAIT_POLICY=PASSIVE
bash bench/peers/setup.sh
exec build/peers-venv/bin/python bench/peers/run_all.py "$@"
