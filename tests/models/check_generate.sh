#!/usr/bin/env bash
# zero-generate (ctest zero_generate): greedy decoding (--temperature 0) of a Hugging Face GPT-2
# made here with transformers gives transformers' own greedy generate(), token for token, with
# the KV cache and without it; sampling is reproducible by --seed; a zero checkpoint generates
# too; bad inputs end with one message and exit status 2. Skipped (77) without transformers.
#   check_generate.sh ZERO_GENERATE ZERO_TRAIN ZERO_RUN PYTHON WORK_DIR
set -uo pipefail
zero_generate="$1"; zero_train="$2"; zero_run="$3"; python="$4"; work="$5"
source "$(dirname "$0")/../lib/transformers_test.sh"
transformers_test "$python" "$work"
prompt="The whale and the sea"
# A small random GPT-2 (context 64), and its greedy continuation by transformers.
expected="$("$python" - "$work/hf" "$prompt" <<'PY'
import sys
import tiktoken  # noqa: F401  (only to be sure the ids below are GPT-2's; encoding is zero's)
import torch
from transformers import GPT2Config, GPT2LMHeadModel
import tiktoken.load
directory, prompt = sys.argv[1], sys.argv[2]
torch.manual_seed(11)
config = GPT2Config(vocab_size=50257, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
model = GPT2LMHeadModel(config).eval()
model.save_pretrained(directory, safe_serialization=True)
ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks("data/gpt2/vocab.bpe", "data/gpt2/encoder.json")
enc = tiktoken.Encoding("gpt2", pat_str=r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
                        mergeable_ranks=ranks, special_tokens={})
ids = torch.tensor([enc.encode_ordinary(prompt)])
with torch.no_grad():
    out = model.generate(ids, max_new_tokens=40, do_sample=False, pad_token_id=0)
new = out[0, ids.size(1):].tolist()
sys.stdout.write(enc.decode_bytes(new).hex())
PY
)" || fail "could not make the Hugging Face model"
for cache in "" "--no-kv-cache"; do
  got="$("$zero_generate" --model "$work/hf" --prompt "$prompt" --max-tokens 40 --temperature 0 \
         $cache 2>"$work/stderr$cache.txt" | head -c -1 | xxd -p | tr -d '\n')" || fail "zero-generate $cache failed: $(cat "$work/stderr$cache.txt")"
  [ "$got" = "$expected" ] || fail "greedy ${cache:-with the KV cache}: zero-generate gave $got, transformers $expected"
  echo "[greedy ${cache:-KV cache}] ok: $(cat "$work/stderr$cache.txt")"
done
# --check-kv-cache (what gpu-check runs after bf16 training on a GPU): both paths at every
# position within the context (64: the prompt's 5 and 59 more) agree within the tolerance
# (fp32 here: far within); past it the windows differ and are not compared; a tolerance of 0
# fails, naming the largest difference (or passes only with none).
"$zero_generate" --model "$work/hf" --prompt "$prompt" --max-tokens 100 --temperature 0 \
  --check-kv-cache --tolerance 1e-4 >/dev/null 2>"$work/check.txt" ||
  fail "--check-kv-cache failed: $(cat "$work/check.txt")"
grep -q "KV-cache check passed: 60 positions (and 40 past the context, not compared)" "$work/check.txt" ||
  fail "--check-kv-cache said: $(cat "$work/check.txt")"
if "$zero_generate" --model "$work/hf" --prompt "$prompt" --max-tokens 3 --temperature 0 \
     --check-kv-cache --tolerance 0 >/dev/null 2>"$work/check0.txt"; then
  grep -q "largest |cached - uncached| / max |logit| 0 " "$work/check0.txt" ||
    fail "--check-kv-cache --tolerance 0 passed with a difference: $(cat "$work/check0.txt")"
else
  grep -q "KV-cache check FAILED" "$work/check0.txt" ||
    fail "--check-kv-cache --tolerance 0: $(cat "$work/check0.txt")"
fi
echo "[KV-cache check] ok: $(grep 'KV-cache check' "$work/check.txt")"
# Sampling: the same seed, the same text; another seed, (almost surely) another.
one="$("$zero_generate" --model "$work/hf" --prompt "$prompt" --max-tokens 30 --seed 5 --top-p 0.9 2>/dev/null)"
two="$("$zero_generate" --model "$work/hf" --prompt "$prompt" --max-tokens 30 --seed 5 --top-p 0.9 2>/dev/null)"
three="$("$zero_generate" --model "$work/hf" --prompt "$prompt" --max-tokens 30 --seed 6 --top-p 0.9 2>/dev/null)"
[ "$one" = "$two" ] || fail "the same seed gave two texts"
[ "$one" != "$three" ] || fail "two seeds gave the same 30 tokens"
echo "[seeded sampling] ok"
# Past the context (64): the cache starts again from the last half, and generation goes on.
"$zero_generate" --model "$work/hf" --prompt "$prompt" --max-tokens 100 --temperature 0 >/dev/null 2>&1 ||
  fail "generation past the context failed"
echo "[past the context] ok"
# A zero checkpoint (its shape from the client state zero-train records).
cat > "$work/config.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 3}}
JSON
timeout 300 "$zero_run" -n 2 -- "$zero_train" --config "$work/config.json" --steps 2 --eval-every 0 \
  --eval-batches 1 --seq-len 32 --sample-tokens 2 --save-every 2 --out "$work/run" >"$work/train.log" 2>&1 ||
  { cat "$work/train.log"; fail "zero-train failed"; }
"$zero_generate" --model "$work/run" --prompt "$prompt" --max-tokens 5 >/dev/null 2>"$work/ckpt.txt" ||
  fail "zero-generate from a checkpoint: $(cat "$work/ckpt.txt")"
echo "[checkpoint] ok: $(cat "$work/ckpt.txt")"
# Bad inputs: one message, exit 2.
for args in "--model $work/nope --prompt x" "--model $work/hf --prompt x --top-p 0" "--model $work/hf --prompt ''"; do
  out="$(eval "$zero_generate" $args 2>&1)"; status=$?
  [ "$status" -eq 2 ] && [ "$(grep -c 'error' <<<"$out")" -eq 1 ] || fail "$args: exit $status: $out"
  echo "[bad input] ok: $(grep error <<<"$out")"
done
echo "zero_generate: ok"
