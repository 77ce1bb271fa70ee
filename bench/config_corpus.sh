#!/usr/bin/env bash
# How many DeepSpeed configs, as published, zero-train accepts: every *.json in DIR through
# `zero-train --plan` at 2 ranks (and, with TRAIN=1, a 3-step run of each one --plan accepts),
# one line per config, then the counts and the refusals grouped by their first words.
#
#   bench/config_corpus.sh DIR [OUT.tsv]        TRAIN=1 bench/config_corpus.sh DIR
#
# The configs stay with whoever collected them (docs/benchmarks.md says where ours came from);
# nothing here depends on which ones they are. Runs gpt2-tiny on the bundled tokens.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
DIR="${1:?usage: bench/config_corpus.sh DIR [OUT.tsv]}"
OUT="${2:-/dev/null}"
BUILD_DIR="${ZERO_BUILD_DIR:-build}"
TRAIN="${TRAIN:-0}"
RANKS="${RANKS:-2}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
: > "$OUT"
accepted=0 refused=0 trained=0 failed=0 total=0
for config in "$DIR"/*.json; do
  total=$((total + 1))
  name="$(basename "$config")"
  if timeout 120 "$BUILD_DIR/bin/zero-run" -n "$RANKS" -- "$BUILD_DIR/bin/zero-train" \
       --config "$config" --plan > "$work/plan.txt" 2>&1; then
    accepted=$((accepted + 1))
    result="accepted"
    if [ "$TRAIN" = 1 ]; then
      if timeout 300 "$BUILD_DIR/bin/zero-run" -n "$RANKS" -- "$BUILD_DIR/bin/zero-train" \
           --config "$config" --steps 3 --seq-len 64 --eval-batches 1 --sample-tokens 2 \
           --out "$work/run" > "$work/train.txt" 2>&1; then
        trained=$((trained + 1))
        result="trained: $(grep -o 'train loss (first -> last) *[0-9.]* -> [0-9.]*' "$work/train.txt" |
                           sed 's/  */ /g')"
      else
        failed=$((failed + 1))
        result="train failed: $(grep -m1 'error' "$work/train.txt" | cut -c1-300)"
      fi
    fi
  else
    refused=$((refused + 1))
    result="refused: $(grep -m1 'error' "$work/plan.txt" | sed "s|$config|CONFIG|" | cut -c1-300)"
  fi
  printf '%s\t%s\n' "$name" "$result" | tee -a "$OUT"
done
echo
echo "configs: $total, accepted by --plan: $accepted, refused: $refused"
[ "$TRAIN" = 1 ] && echo "trained 3 steps at $RANKS ranks: $trained, failed: $failed"
exit 0
