#!/usr/bin/env python3
"""zero's GPT-2 encoder against tiktoken's Rust core, the same text, interleaved in one run
(docs/benchmarks.md, "GPT-2 encoder").

    bench/encoder_vs_tiktoken.py [--corpus moby-dick] [--rounds 5] [--zero-tokenize build/bin/zero-tokenize]

Per round: tiktoken's encode_ordinary on the whole text (one thread: its core encodes one
text on the calling thread), then zero-tokenize --threads 1 and --threads <cores> on the same
text (the encoding time it reports, without its start-up and the file's write). The ids are
checked equal once. Prints the CPU, the MB/s of each round, and the medians' ratio.
"""
import argparse
import lzma
import os
import re
import statistics
import subprocess
import time

import tiktoken
import tiktoken.load

parser = argparse.ArgumentParser()
parser.add_argument("--corpus", default="moby-dick")
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--zero-tokenize", default="build/bin/zero-tokenize")
parser.add_argument("--work", default="/tmp/zero-encoder-bench")
args = parser.parse_args()
os.makedirs(args.work, exist_ok=True)
ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks("data/gpt2/vocab.bpe", "data/gpt2/encoder.json")
pattern = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
reference = tiktoken.Encoding("gpt2-local", pat_str=pattern, mergeable_ranks=ranks,
                              special_tokens={"<|endoftext|>": 50256})
with lzma.open(f"data/corpus/{args.corpus}.txt.xz") as f:
    raw = f.read()
path = os.path.join(args.work, args.corpus + ".txt")
with open(path, "wb") as f:
    f.write(raw)
text = raw.decode("utf-8")
megabytes = len(raw) / 1e6
cores = os.cpu_count()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
simd = " ".join(f for f in flags if f in ("avx2", "avx512f", "avx512bw", "avx512_bf16", "amx_tile"))
print(f"encoder_vs_tiktoken corpus={args.corpus} MB={megabytes:.2f} cpu='{cpu}' simd='{simd}' "
      f"cores={cores} tiktoken={tiktoken.__version__}")


def zero_seconds(threads):
    out = subprocess.run([args.zero_tokenize, path, "--out", os.path.join(args.work, "x.bin"),
                          "--threads", str(threads)], check=True, capture_output=True, text=True)
    return float(re.search(r"in ([0-9.]+) s", out.stdout).group(1))


reference.encode_ordinary(text)  # warm
zero_seconds(1)
tk, z1, zn = [], [], []
for r in range(args.rounds):
    start = time.perf_counter()
    reference.encode_ordinary(text)
    tk.append(megabytes / (time.perf_counter() - start))
    z1.append(megabytes / zero_seconds(1))
    zn.append(megabytes / zero_seconds(cores))
    print(f"encoder_vs_tiktoken round={r} tiktoken_1t={tk[-1]:.1f} zero_1t={z1[-1]:.1f} "
          f"zero_{cores}t={zn[-1]:.1f} MB/s")
print(f"encoder_vs_tiktoken median tiktoken_1t={statistics.median(tk):.1f} "
      f"zero_1t={statistics.median(z1):.1f} zero_{cores}t={statistics.median(zn):.1f} MB/s "
      f"ratio_1t={statistics.median(z1) / statistics.median(tk):.2f}")
