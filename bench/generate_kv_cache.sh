#!/usr/bin/env bash
# zero-generate's tokens/s with and without the KV cache (docs/benchmarks.md, "Generation"):
# a GPT-2 of the given shape with random weights (made with transformers, no download), a
# 5-token prompt, N new tokens, greedy, one process on every core; the runs alternate, with
# Hugging Face transformers' generate() on the same model (its KV cache on) as the reference.
#   bench/generate_kv_cache.sh [SHAPE=gpt2] [TOKENS=200] [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
shape="${1:-gpt2}"; tokens="${2:-200}"; rounds="${3:-3}"
dir="/tmp/zero-generate-bench-$shape"
if [ ! -f "$dir/model.safetensors" ]; then
  python3 - "$dir" "$shape" <<'PY'
import sys
import torch
from transformers import GPT2Config, GPT2LMHeadModel
directory, shape = sys.argv[1], sys.argv[2]
sizes = {"gpt2": (768, 12, 12), "gpt2-medium": (1024, 24, 16)}
width, layers, heads = sizes[shape]
torch.manual_seed(0)
GPT2LMHeadModel(GPT2Config(n_embd=width, n_layer=layers, n_head=heads)).save_pretrained(directory)
PY
fi
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "generate_kv_cache shape=$shape tokens=$tokens cpu='$cpu' cores=$(nproc)"
for round in $(seq "$rounds"); do
  for cache in "" "--no-kv-cache"; do
    line="$(build/bin/zero-generate --model "$dir" --prompt "The whale and the sea" \
              --max-tokens "$tokens" --temperature 0 $cache 2>&1 >/dev/null | grep tokens/s)"
    echo "generate_kv_cache round=$round ${cache:---kv-cache}: $line"
  done
  python3 - "$dir" "$tokens" "$round" <<'PY'
import sys, time
import torch
from transformers import GPT2LMHeadModel
directory, tokens, round_ = sys.argv[1], int(sys.argv[2]), sys.argv[3]
model = GPT2LMHeadModel.from_pretrained(directory).eval()
prompt = torch.tensor([[464, 22206, 290, 262, 5417]])  # "The whale and the sea"
with torch.inference_mode():
    model.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=50256)  # warm
    start = time.perf_counter()
    out = model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                         pad_token_id=50256)
    seconds = time.perf_counter() - start
print(f"generate_kv_cache round={round_} transformers {torch.__version__}: "
      f"{out.shape[1] - prompt.shape[1]} tokens in {seconds:.2f} s "
      f"({(out.shape[1] - prompt.shape[1]) / seconds:.1f} tokens/s), cpu, KV cache on")
PY
done
