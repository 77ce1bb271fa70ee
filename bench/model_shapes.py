"""Model FLOPs per token of zero's --model presets, for the benchmarks (bench/llama_vs_gpt2.sh):
6 x the parameters the step multiplies by + 12 x layers x seq x attention width (forward and
backward of the scores and the weighted values), the PaLM paper's count. The shapes are those
of src/models/gpt2.cpp's and src/models/llama.cpp's presets."""

GPT2 = {"gpt2-tiny": (4, 128, 50257), "gpt2-mini": (6, 384, 50257)}
# layers, hidden, intermediate, heads, kv heads, vocab (tied)
LLAMA = {"llama-tiny": (4, 128, 384, 4, 2, 50257), "llama-mini": (6, 384, 1216, 6, 2, 50257)}


def flops_per_token(name, seq):
    if name in GPT2:
        layers, width, vocab = GPT2[name]
        params = vocab * width + layers * (12 * width * width + 13 * width) + 2 * width
        return 6 * params + 12 * layers * seq * width
    layers, hidden, inter, heads, kv, vocab = LLAMA[name]
    head_dim = hidden // heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv * head_dim
    params = vocab * hidden + layers * (attention + 3 * hidden * inter + 2 * hidden) + hidden
    return 6 * params + 12 * layers * seq * heads * head_dim
