#!/usr/bin/env bash
# Hugging Face tokenizers (ctest hf_tokenizer): tokenizer.json files and their ids made with the
# tokenizers library (tests/data/make_hf_tokenizers.py), test_hf_tokenizer on them, and
# zero-tokenize --tokenizer: its token files hold the library's ids, the tokenizer's eos token
# before each document (nothing without one), as uint16 ids, or as uint32 ids (llm.c's Llama 3
# format) for a tokenizer of more than 65536 ids; --tokenizer with --encoder refused. Skipped
# (exit 77) without Python's tokenizers.
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
# llm.c's two formats (dev/data/data_common.py): GPT-2's uint16 ids, Llama 3's uint32 ids.
wide = tokenizer.get_vocab_size() > 65536
if (magic, version) != ((20240801, 7) if wide else (20240520, 1)):
    sys.exit(f"{path}: magic {magic}, version {version} for a vocabulary of "
             f"{tokenizer.get_vocab_size()}")
width = 4 if wide else 2
if len(data) != 1024 + width * count:
    sys.exit(f"{path}: {len(data)} bytes for {count} ids of {width} bytes")
ids = list(struct.unpack(f"<{count}{'I' if wide else 'H'}", data[1024:]))
if ids != expected:
    sys.exit(f"{path}: {ids[:20]}... instead of {expected[:20]}...")
print(f"[{os.path.basename(directory)}] ok: {count} tokens of {8 * width} bits")
PY
}
for name in llama3-style smollm2-style handmade; do
  out="$("$zero_tokenize" --tokenizer "$work/hf/$name" "$work/docs" --out "$work/$name.bin" \
         --threads 2)" || fail "zero-tokenize --tokenizer $name: $out"
  holds_library_ids "$work/hf/$name" "$work/docs" "$work/$name.bin" ||
    fail "zero-tokenize --tokenizer $name: other ids"
done
# More ids than uint16 holds, as Llama 3's 128256: a BPE vocabulary padded to 128000 ids with
# entries no merge makes, then its eos token (id 128000, as Llama 3's <|begin_of_text|>); every
# document starts with it, so the file must hold uint32 ids.
"$python" - "$work/big-vocab" <<'PY' || fail "could not make the big tokenizer"
import json, lzma, os, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
directory = sys.argv[1]
os.makedirs(directory, exist_ok=True)
text = lzma.open("data/corpus/moby-dick.txt.xz", "rt", encoding="utf-8").read()[:300_000]
tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
tokenizer.train_from_iterator([text], trainers.BpeTrainer(
    vocab_size=1000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
saved = json.loads(tokenizer.to_str())
vocab = saved["model"]["vocab"]
for i in range(len(vocab), 128000):
    vocab[f"<|filler_{i}|>"] = i
tokenizer = Tokenizer.from_str(json.dumps(saved))
tokenizer.add_special_tokens(["<|end_of_text|>"])
assert tokenizer.token_to_id("<|end_of_text|>") == 128000
tokenizer.save(os.path.join(directory, "tokenizer.json"))
json.dump({"eos_token": "<|end_of_text|>"},
          open(os.path.join(directory, "tokenizer_config.json"), "w"))
PY
out="$("$zero_tokenize" --tokenizer "$work/big-vocab" "$work/docs" --out "$work/big.bin" \
       --threads 2)" || fail "zero-tokenize --tokenizer big-vocab: $out"
grep -qF "of 32 bits" <<<"$out" || fail "zero-tokenize did not say it wrote uint32 ids: $out"
holds_library_ids "$work/big-vocab" "$work/docs" "$work/big.bin" ||
  fail "zero-tokenize --tokenizer big-vocab: other ids"
out="$("$zero_tokenize" --tokenizer "$work/hf/handmade" --encoder data/gpt2/encoder.json \
       "$work/docs" --out "$work/both.bin" 2>&1)"
status=$?
[ "$status" -eq 2 ] && grep -q "excludes" <<<"$out" ||
  fail "--tokenizer with --encoder: exit $status, $out"
echo "[tokenizer-and-encoder] ok: $out"
echo "hf_tokenizer: ok"
