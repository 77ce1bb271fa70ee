#!/usr/bin/env bash
# The README's "Fine-tune a Llama-family model", end to end through the programs (ctest
# llama_walkthrough), on a directory made here with transformers and tokenizers (no download): a
# random SmolLM2-shaped Llama (tied, grouped-query attention) saved with save_pretrained beside a
# byte-level BPE tokenizer trained on Moby-Dick (SmolLM2's pre-tokenizer) with Llama 3's id
# space: the vocabulary padded to 128000 ids (entries no merge makes), then the eos token
# <|end_of_text|> as id 128000, so the token files hold uint32 ids (llm.c's Llama 3 format);
# the model has 128064 embedding rows, more than the tokenizer's 128001 ids, as Qwen2.5's
# checkpoints have (Note [Padded vocabularies]). A tokenizer with more ids than the model has
# rows is refused.
#   1. zero-train --init DIR --data TEXT: tokenized with DIR's tokenizer.json, trained at stage 3
#      on 2 ranks, checkpointed; the tokenizer is copied into the run directory;
#   2. zero-generate --model RUN greedy, with and without the KV cache, equals transformers'
#      generate() on the export with the same tokenizer, token for token;
#   3. zero-ckpt export: from_pretrained loads it (step 2 uses it).
# Skipped (exit 77) without transformers or tokenizers.
#   check_llama_walkthrough.sh ZERO_TRAIN ZERO_RUN ZERO_GENERATE ZERO_CKPT PYTHON WORK_DIR
set -uo pipefail
zero_train="$1"; zero_run="$2"; zero_generate="$3"; zero_ckpt="$4"; python="$5"; work="$6"
source "$(dirname "$0")/../lib/transformers_test.sh"
transformers_test "$python" "$work" tokenizers safetensors
"$python" - "$work" <<'PY' || fail "could not make the Llama directory"
import json, lzma, os, sys
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM
work = sys.argv[1]
text = lzma.open("data/corpus/moby-dick.txt.xz", "rt", encoding="utf-8").read()
with open(os.path.join(work, "book.txt"), "w", encoding="utf-8") as f:
    f.write(text[:120_000])
tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
    [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
tokenizer.decoder = decoders.ByteLevel()
tokenizer.train_from_iterator([text[200_000:800_000]], trainers.BpeTrainer(
    vocab_size=2048, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
saved = json.loads(tokenizer.to_str())
for i in range(len(saved["model"]["vocab"]), 128000):
    saved["model"]["vocab"][f"<|filler_{i}|>"] = i
tokenizer = Tokenizer.from_str(json.dumps(saved))
tokenizer.add_special_tokens(["<|end_of_text|>"])
eos = tokenizer.token_to_id("<|end_of_text|>")
assert eos == 128000
model_dir = os.path.join(work, "smol")
os.makedirs(model_dir, exist_ok=True)
tokenizer.save(os.path.join(model_dir, "tokenizer.json"))
json.dump({"bos_token": "<|end_of_text|>", "eos_token": "<|end_of_text|>"},
          open(os.path.join(model_dir, "tokenizer_config.json"), "w"))
torch.manual_seed(5)
config = LlamaConfig(vocab_size=128064, hidden_size=64, intermediate_size=160,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     max_position_embeddings=128, tie_word_embeddings=True, rope_theta=100000.0,
                     bos_token_id=eos, eos_token_id=eos)
LlamaForCausalLM(config).save_pretrained(model_dir, safe_serialization=True)
PY
cat > "$work/config.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}}, "zero_optimization": {"stage": 3}}
JSON
timeout 300 "$zero_run" -n 2 -- "$zero_train" --config "$work/config.json" --init "$work/smol" \
  --data "$work/book.txt" --seq-len 64 --steps 6 --eval-every 3 --eval-batches 1 \
  --sample-tokens 8 --save-every 6 --out "$work/run" >"$work/train.log" 2>&1 ||
  { cat "$work/train.log"; fail "zero-train failed"; }
grep -q "tokenized 1 file(s) of $work/book.txt" "$work/train.log" || { cat "$work/train.log"; fail "no tokenize line"; }
grep -q "starting from the weights of $work/smol" "$work/train.log" || fail "no init line"
"$python" - "$work/book.txt.zero-tokens/data_train.bin" <<'PY' || fail "the token file is not uint32"
import struct, sys
magic, version, count = struct.unpack("<3i", open(sys.argv[1], "rb").read(12))
ids = struct.unpack("<2I", open(sys.argv[1], "rb").read(1032)[1024:])
assert (magic, version) == (20240801, 7) and ids[0] == 128000, (magic, version, ids)
print(f"[token file] ok: {count} uint32 ids, the first the eos token {ids[0]}")
PY
[ -f "$work/run/tokenizer.json" ] && [ -f "$work/run/tokenizer_config.json" ] ||
  fail "the tokenizer was not copied into the run directory"
grep -E "^step 6/6|^summary|^sample" "$work/train.log"
out="$(timeout 120 "$zero_run" -n 1 -- "$zero_train" --config "$work/config.json" --model llama-tiny \
       --tokenizer "$work/smol" \
       --data data/tokens/moby_dick --steps 1 --out "$work/refused" 2>&1)" &&
  fail "llama-tiny (50257 rows) with a tokenizer of 128001 ids was not refused"
grep -qF "has 128001 ids, more than the 50257 embedding rows of llama-tiny" <<<"$out" ||
  fail "a tokenizer larger than the model: $out"
echo "[tokenizer larger than the model] refused: $(grep -m1 -o 'the tokenizer .*rows of [^:]*' <<<"$out")"
"$zero_ckpt" export "$work/run/checkpoints" --out "$work/export/model.safetensors" >"$work/export.log" 2>&1 ||
  { cat "$work/export.log"; fail "zero-ckpt export failed"; }
prompt="Call me Ishmael. Some years ago"
expected="$("$python" - "$work/export" "$work/smol/tokenizer.json" "$prompt" <<'PY'
import sys
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM
directory, tokenizer_path, prompt = sys.argv[1:4]
tokenizer = Tokenizer.from_file(tokenizer_path)
model = AutoModelForCausalLM.from_pretrained(directory).eval()
model.generation_config.eos_token_id = None  # every token, as zero-generate's --max-tokens
ids = torch.tensor([tokenizer.encode(prompt, add_special_tokens=False).ids])
with torch.no_grad():
    out = model.generate(ids, max_new_tokens=30, do_sample=False, pad_token_id=0)
new = out[0, ids.size(1):].tolist()
sys.stdout.write(tokenizer.decode(new, skip_special_tokens=False).encode("utf-8").hex())
PY
)" || fail "transformers could not generate from the export"
for cache in "" "--no-kv-cache"; do
  got="$("$zero_generate" --model "$work/run" --prompt "$prompt" --max-tokens 30 --temperature 0 \
         $cache 2>"$work/stderr$cache.txt" | head -c -1 | xxd -p | tr -d '\n')" ||
    fail "zero-generate $cache failed: $(cat "$work/stderr$cache.txt")"
  [ "$got" = "$expected" ] ||
    fail "greedy ${cache:-with the KV cache}: zero-generate gave $got, transformers $expected"
  echo "[greedy ${cache:-KV cache}] ok: $(cat "$work/stderr$cache.txt")"
done
echo "llama_walkthrough: ok"
