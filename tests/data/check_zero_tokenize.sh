#!/usr/bin/env bash
# zero-tokenize from the command line (ctest zero_tokenize_cli): a train/validation pair that
# zero-train reads, one file of several documents, and each bad input ending with exit status 2,
# one line naming the file (and the byte offset), and nothing written.
#   check_zero_tokenize.sh ZERO_TOKENIZE DATA_DIR WORK_DIR
set -uo pipefail
zero_tokenize="$1"; data="$2"; work="$3"
rm -rf "$work"; mkdir -p "$work/docs/more"
run() { "$zero_tokenize" --encoder "$data/gpt2/encoder.json" --vocab "$data/gpt2/vocab.bpe" "$@"; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
xz -dc "$data/corpus/moby-dick.txt.xz" > "$work/moby.txt"
out="$(run "$work/moby.txt" --out "$work/moby" --val-fraction 0.05 --threads 2)" || fail "split: $out"
# The shipped files are this split of the same text (their rule rounds down, ours to nearest):
# together, the same tokens.
cat "$work/moby_train.bin" > /dev/null && cmp -s <(tail -c +1025 "$work/moby_train.bin"; tail -c +1025 "$work/moby_val.bin") \
  <(tail -c +1025 "$data/tokens/moby_dick_train.bin"; tail -c +1025 "$data/tokens/moby_dick_val.bin") ||
  fail "moby-dick tokens differ from the shipped ones"
echo "[split] ok: $out"
printf 'First document.' > "$work/docs/a.txt"; printf 'Second one.' > "$work/docs/more/b.txt"
out="$(run "$work/docs" --out "$work/docs.bin")" || fail "directory: $out"
grep -q "2 file(s)" <<<"$out" || fail "directory: expected 2 documents: $out"
echo "[directory] ok: $out"
# Bad inputs: exit 2, the file and what is wrong in one line, no output file.
printf 'caf\xe9' > "$work/latin1.txt"; : > "$work/empty.txt"; printf 'a\0b' > "$work/bin.txt"
mkdir -p "$work/no-text"; touch "$work/no-text/readme.md"
bad() {  # NAME EXPECTED -- ARGS
  local name="$1" expected="$2"; shift 3
  local output status
  output="$(run "$@" --out "$work/bad-$name.bin" 2>&1)"; status=$?
  if [ "$status" -ne 2 ] || ! grep -qF -- "$expected" <<<"$output" || [ "$(wc -l <<<"$output")" -ne 1 ] ||
     [ -e "$work/bad-$name.bin" ]; then
    fail "[$name] exit $status, output: $output"
  else
    echo "[$name] ok: $output"
  fi
}
bad not_utf8 "latin1.txt' is not valid UTF-8 at byte offset 3" -- "$work/latin1.txt"
bad empty "empty.txt' is empty" -- "$work/empty.txt"
bad binary "bin.txt' is a binary file, not text (a NUL byte at byte offset 1)" -- "$work/bin.txt"
bad missing "nope.txt' does not exist" -- "$work/nope.txt"
bad no_text "is a directory without any .txt file" -- "$work/no-text"
bad after_good "latin1.txt" -- "$work/docs/a.txt" "$work/latin1.txt"
echo "$failures failing case(s)"
[ "$failures" -eq 0 ]
