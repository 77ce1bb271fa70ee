#!/usr/bin/env python3
"""zero's GPT-2 encoder against tiktoken's Rust core, the same text, interleaved in one run
(docs/benchmarks.md, "GPT-2 encoder").

    bench/encoder_vs_tiktoken.py [--corpus moby-dick] [--rounds 5] [--zero-tokenize build/bin/zero-tokenize]

Per round: tiktoken's encode_ordinary on the whole text (one thread: its core encodes one
text on the calling thread), then zero-tokenize --threads 1 and --threads <cores> on the same
text (the encoding time it reports, without its start-up and the file's write). The ids are
checked equal once. Prints the CPU, the MB/s of each round, and the medians' ratio.
"""
import os
import statistics
import time

import tiktoken
import tiktoken.load

from tokenize_bench import arguments, corpus_file, cpu, zero_seconds

args = arguments("moby-dick", "/tmp/zero-encoder-bench")
ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks("data/gpt2/vocab.bpe", "data/gpt2/encoder.json")
pattern = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
reference = tiktoken.Encoding("gpt2-local", pat_str=pattern, mergeable_ranks=ranks,
                              special_tokens={"<|endoftext|>": 50256})
path, raw = corpus_file(args)
text = raw.decode("utf-8")
megabytes = len(raw) / 1e6
cores = os.cpu_count()
cpu_name, simd = cpu()
print(f"encoder_vs_tiktoken corpus={args.corpus} MB={megabytes:.2f} cpu='{cpu_name}' simd='{simd}' "
      f"cores={cores} tiktoken={tiktoken.__version__}")


def zero_seconds_on(threads):
    return zero_seconds(args.zero_tokenize, [path, "--out", os.path.join(args.work, "x.bin"),
                                             "--threads", str(threads)])


reference.encode_ordinary(text)  # warm
zero_seconds_on(1)
tk, z1, zn = [], [], []
for r in range(args.rounds):
    start = time.perf_counter()
    reference.encode_ordinary(text)
    tk.append(megabytes / (time.perf_counter() - start))
    z1.append(megabytes / zero_seconds_on(1))
    zn.append(megabytes / zero_seconds_on(cores))
    print(f"encoder_vs_tiktoken round={r} tiktoken_1t={tk[-1]:.1f} zero_1t={z1[-1]:.1f} "
          f"zero_{cores}t={zn[-1]:.1f} MB/s")
print(f"encoder_vs_tiktoken median tiktoken_1t={statistics.median(tk):.1f} "
      f"zero_1t={statistics.median(z1):.1f} zero_{cores}t={statistics.median(zn):.1f} MB/s "
      f"ratio_1t={statistics.median(z1) / statistics.median(tk):.2f}")
