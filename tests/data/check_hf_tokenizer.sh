#!/usr/bin/env bash
# Hugging Face tokenizers (ctest hf_tokenizer): tokenizer.json files and their ids made with the
# tokenizers library (tests/data/make_hf_tokenizers.py), test_hf_tokenizer on them, and
# zero-tokenize --tokenizer: its token files hold the library's ids, the tokenizer's eos token
# before each document (nothing without one); a tokenizer of more than 65536 ids, and
# --tokenizer with --encoder, refused. Skipped (exit 77) without Python's tokenizers.
#   check_hf_tokenizer.sh TEST_BINARY ZERO_TOKENIZE PYTHON WORK_DIR
set -uo pipefail
test_binary="$1"; zero_tokenize="$2"; python="$3"; work="$4"
source "$(dirname "$0")/../lib/transformers_test.sh"
python_modules_test "$python" "$work" tokenizers
"$python" tests/data/make_hf_tokenizers.py "$work/hf" >"$work/make.log" 2>&1 ||
  { cat "$work/make.log"; fail "could not make the tokenizers"; }
cat "$work/make.log"
ZERO_TEST_HF_MANIFEST="$work/hf/manifest.json" timeout 600 "$test_binary" --gtest_color=no \
  >"$work/test.log" 2>&1 || { cat "$work/test.log"; fail "test_hf_tokenizer"; }
grep -E "^\[  (PASSED|SKIPPED) " "$work/test.log"

# zero-tokenize --tokenizer: two documents, in name order.
mkdir -p "$work/docs"
printf 'Call me Ishmael. Some years ago<|endoftext|>never mind how long.\n' >"$work/docs/a.txt"
printf "It's 1851:\r\n\tthe whale's 12345 tons \xf0\x9f\x90\xb3\n" >"$work/docs/b.txt"
# Whether token file $3 holds the library's ids of the documents in $2 for tokenizer $1, each
# after the eos token (none without one).
holds_library_ids() {
  "$python" - "$@" <<'PY'
import json, os, struct, sys
from tokenizers import Tokenizer
directory, docs, path = sys.argv[1:]
tokenizer = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
config_path = os.path.join(directory, "tokenizer_config.json")
eos = json.load(open(config_path)).get("eos_token") if os.path.exists(config_path) else None
expected = []
for doc in sorted(os.listdir(docs)):
    if eos is not None:
        expected.append(tokenizer.token_to_id(eos if isinstance(eos, str) else eos["content"]))
    expected += tokenizer.encode(open(os.path.join(docs, doc), encoding="utf-8", newline="").read(),
                                 add_special_tokens=False).ids
data = open(path, "rb").read()
magic, version, count = struct.unpack("<3i", data[:12])
ids = list(struct.unpack(f"<{count}H", data[1024:1024 + 2 * count]))
if (magic, version) != (20240520, 1) or ids != expected:
    sys.exit(f"{path}: {ids[:20]}... instead of {expected[:20]}...")
print(f"[{os.path.basename(directory)}] ok: {count} tokens")
PY
}
for name in llama3-style smollm2-style handmade; do
  out="$("$zero_tokenize" --tokenizer "$work/hf/$name" "$work/docs" --out "$work/$name.bin" \
         --threads 2)" || fail "zero-tokenize --tokenizer $name: $out"
  holds_library_ids "$work/hf/$name" "$work/docs" "$work/$name.bin" ||
    fail "zero-tokenize --tokenizer $name: other ids"
done
# More ids than a token file's uint16 holds: refused, naming the tokenizer; nothing written.
"$python" - "$work/big-vocab" <<'PY' || fail "could not make the big tokenizer"
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
vocab = {c: i for i, c in enumerate("abcĠ")}
vocab["ab"] = 70000
tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b")]))
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
tokenizer.save(sys.argv[1] + ".json")
PY
out="$("$zero_tokenize" --tokenizer "$work/big-vocab.json" "$work/docs" --out "$work/big.bin" 2>&1)"
status=$?
if [ "$status" -ne 2 ] || [ -e "$work/big.bin" ] ||
   ! grep -qF "big-vocab.json' has a vocab_size of 70001, more than 65536" <<<"$out"; then
  fail "a vocabulary of 70001: exit $status, $out"
fi
echo "[big-vocab] ok: $out"
out="$("$zero_tokenize" --tokenizer "$work/hf/handmade" --encoder data/gpt2/encoder.json \
       "$work/docs" --out "$work/both.bin" 2>&1)"
status=$?
[ "$status" -eq 2 ] && grep -q "excludes" <<<"$out" ||
  fail "--tokenizer with --encoder: exit $status, $out"
echo "[tokenizer-and-encoder] ok: $out"
echo "hf_tokenizer: ok"
