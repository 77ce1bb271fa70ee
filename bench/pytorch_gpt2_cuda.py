#!/usr/bin/env python3
"""PyTorch training GPT-2 on one CUDA GPU, beside bench_cuda (zero) in docs/benchmarks.md, "CUDA".

    bench/pytorch_gpt2_cuda.py [--model gpt2] [--batch 16] [--seq 1024] [--steps 20] [--warmup 3]

The same model as zero's (Hugging Face's GPT2LMHeadModel of that size, tied head, no dropout),
random tokens, AdamW(lr 3e-4, weight decay 0.1, fused=True), gradient clipping at 1.0, bf16
autocast over fp32 parameters, trained two ways: plain, and with FSDP2 (fully_shard) at world
size 1 over NCCL. Prints the GPU's measured bf16 GEMM peak and, per way, a line
    pytorch_gpt2 run=plain|fsdp2 ms_per_step=... tokens_per_s=... mfu=...
with MFU counted as bench_cuda does: 6N + 12 L d T FLOPs per token.
"""
import argparse
import os
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="gpt2")
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--seq", type=int, default=1024)
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--warmup", type=int, default=3)
args = parser.parse_args()
if not torch.cuda.is_available():
    print("pytorch_gpt2: no CUDA device; nothing measured")
    raise SystemExit(0)

from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

SIZES = {"gpt2": (768, 12, 12), "gpt2-medium": (1024, 24, 16), "gpt2-large": (1280, 36, 20),
         "gpt2-xl": (1600, 48, 25)}
width, layers, heads = SIZES[args.model]
device = torch.device("cuda", 0)


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


def build():
    torch.manual_seed(0)
    config = GPT2Config(n_embd=width, n_layer=layers, n_head=heads, n_positions=1024,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config).to(device)


def run(name, model):
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    data = torch.randint(0, 50257, (args.batch, args.seq + 1), device=device)
    x, y = data[:, :-1], data[:, 1:]

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=y).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.steps
    params = sum(p.numel() for p in model.parameters())
    flops = 6 * params + 12 * layers * width * args.seq
    rate = args.batch * args.seq / seconds
    print(f"pytorch_gpt2 run={name} ms_per_step={seconds * 1e3:.1f} tokens_per_s={rate:.0f} "
          f"mfu={rate * flops / peak:.3f}", flush=True)


peak = peak_bf16()
print(f"pytorch_gpt2 torch={torch.__version__} model={args.model} batch={args.batch} "
      f"seq={args.seq} bf16_gemm_peak_tflops={peak / 1e12:.1f}", flush=True)
run("plain", build())
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29511")
torch.distributed.init_process_group("nccl", rank=0, world_size=1)
from torch.distributed.fsdp import fully_shard  # noqa: E402

model = build()
for block in model.transformer.h:
    fully_shard(block)
fully_shard(model)
run("fsdp2", model)
torch.distributed.destroy_process_group()
