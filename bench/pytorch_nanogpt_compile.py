#!/usr/bin/env python3
"""The baseline issue 25 names: a minimal GPT-2 in PyTorch (nanoGPT's shape of model: SDPA
attention, fused AdamW), trained the way bench_cuda trains zero, eager and under torch.compile,
on one CUDA GPU (docs/benchmarks.md, "CUDA").

    bench/pytorch_nanogpt_compile.py [--model gpt2] [--batch 16] [--seq 1024] [--steps 20]
                                     [--warmup 5] [--profile 3] [--runs eager,compile,compile_padded]

The model is GPT-2's (pre-LayerNorm blocks, GELU tanh, tied head, no dropout, GPT-2's init),
with random tokens; bf16 autocast over fp32 parameters, AdamW(lr 3e-4, weight decay 0.1,
fused=True), gradient clipping at 1.0, as bench_cuda. Runs:
    eager            the model as written
    compile          torch.compile(model), vocabulary 50257
    compile_padded   the same with the vocabulary padded to 50304 (a multiple of 64: nanoGPT's
                     trick; the padding rows are never a target)
Each prints "pytorch_nanogpt run=NAME ms_per_step=... tokens_per_s=... mfu=..." (MFU as
bench_cuda counts it: 6N + 12 L d T FLOPs per token, N without the padding rows, against the
GPU's measured bf16 GEMM peak). With --profile, the compiled run's GPU kernels are summed by
name over that many steps: "pytorch_nanogpt profile ms_per_step=... pct=... name=...".
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="gpt2")
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--seq", type=int, default=1024)
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--profile", type=int, default=0)
parser.add_argument("--runs", default="eager,compile,compile_padded")
args = parser.parse_args()
if not torch.cuda.is_available():
    print("pytorch_nanogpt: no CUDA device; nothing measured")
    raise SystemExit(0)

SIZES = {"gpt2": (768, 12, 12), "gpt2-medium": (1024, 24, 16), "gpt2-large": (1280, 36, 20),
         "gpt2-xl": (1600, 48, 25)}
WIDTH, LAYERS, HEADS = SIZES[args.model]
VOCAB = 50257
device = torch.device("cuda", 0)
torch.backends.cuda.matmul.allow_tf32 = True


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.attn = Attention()
        self.fc, self.fc_proj = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, WIDTH), nn.Embedding(1024, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(WIDTH)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * LAYERS) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))


def peak_bf16():
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    return 2 * 8192 ** 3 * 10 / (time.perf_counter() - start)


def run(name, peak):
    torch.manual_seed(0)
    vocab = 50304 if name == "compile_padded" else VOCAB
    model = GPT(vocab).to(device)
    params = sum(p.numel() for p in model.parameters()) - (vocab - VOCAB) * WIDTH
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    forward = torch.compile(model) if name.startswith("compile") else model
    data = torch.randint(0, VOCAB, (args.batch, args.seq + 1), device=device)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = forward(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    for _ in range(args.warmup):  # compiles on the first
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.steps
    flops = 6 * params + 12 * LAYERS * WIDTH * args.seq
    rate = args.batch * args.seq / seconds
    print(f"pytorch_nanogpt run={name} ms_per_step={seconds * 1e3:.1f} tokens_per_s={rate:.0f} "
          f"mfu={rate * flops / peak:.3f}", flush=True)
    if args.profile > 0 and name.startswith("compile"):
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(args.profile):
                step()
            torch.cuda.synchronize()
        totals = {}
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                totals[event.name] = totals.get(event.name, 0.0) + event.device_time_total
        whole = sum(totals.values())
        for kernel, us in sorted(totals.items(), key=lambda item: -item[1])[:25]:
            print(f"pytorch_nanogpt profile run={name} ms_per_step={us / 1e3 / args.profile:.3f} "
                  f"pct={100 * us / whole:.1f} name={kernel[:150]}", flush=True)


peak = peak_bf16()
print(f"pytorch_nanogpt torch={torch.__version__} model={args.model} batch={args.batch} "
      f"seq={args.seq} bf16_gemm_peak_tflops={peak / 1e12:.1f}", flush=True)
for name in args.runs.split(","):
    run(name, peak)
