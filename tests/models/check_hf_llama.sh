#!/usr/bin/env bash
# Llama-family directories in (ctest hf_llama): make them with transformers, then run
# test_llama_pretrained at 1, 2 and 3 ranks on all of them. Skipped (exit 77) without Python's
# transformers.
#   check_hf_llama.sh TEST_BINARY MPIEXEC PYTHON WORK_DIR
set -uo pipefail
test_binary="$1"; mpiexec="$2"; python="$3"; work="$4"
source "$(dirname "$0")/../lib/transformers_test.sh"
transformers_test "$python" "$work" safetensors
"$python" tests/models/make_hf_llama.py "$work/hf" >"$work/make.log" 2>&1 ||
  { cat "$work/make.log"; fail "could not make the Hugging Face directories"; }
export ZERO_TEST_HF_MANIFEST="$work/hf/manifest.json"
for ranks in 1 2 3; do
  timeout 600 "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    -x ZERO_TEST_HF_MANIFEST -np "$ranks" "$test_binary" --gtest_color=no >"$work/test-np$ranks.log" 2>&1 ||
    { cat "$work/test-np$ranks.log"; fail "test_llama_pretrained at $ranks rank(s)"; }
  grep -E "^\[  (PASSED|SKIPPED) " "$work/test-np$ranks.log" | head -3
done
echo "hf_llama: ok"
