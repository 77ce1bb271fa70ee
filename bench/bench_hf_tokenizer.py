#!/usr/bin/env python3
"""zero's Hugging Face tokenizer (zero::HfTokenizer) against the `tokenizers` library, one thread
each, on the same text, interleaved in one run.

    bench/bench_hf_tokenizer.py [--corpus austen] [--rounds 5]
                                [--zero-tokenize build/bin/zero-tokenize] [--work DIR]

The tokenizers are those tests/data/make_hf_tokenizers.py makes (GPT-2's own vocabulary
converted, and GPT-2-, Llama-3-, SmolLM2- and Qwen2-style ones it trains), made into WORK/hf
first when absent. Per round and tokenizer, with TOKENIZERS_PARALLELISM=false and
RAYON_NUM_THREADS=1 (one thread):
  - tokenizers_1t: the library's Tokenizer.encode(text, add_special_tokens=False) on the whole
    corpus as one document;
  - tokenizers_batch_1t: its encode_batch on the corpus's paragraphs (the library is faster on
    many short texts than on one long one; the ids differ a little where paragraphs meet);
  - zero_1t: zero-tokenize --tokenizer --threads 1 on the corpus as one document (the encoding
    time it reports, without its start-up, the tokenizer's loading and the file's write).
zero's ids are checked equal to the library's once. Prints the CPU, each round's MB/s and the
medians' ratios. The default corpus, Austen's novels, has no code point from U+0300 up, which
the Qwen2-style tokenizer's NFC needs.
"""
import os
import statistics
import struct
import subprocess
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
import tokenizers  # noqa: E402  (after the variables that keep it on one thread)

from tokenize_bench import REPO, arguments, corpus_file, cpu, zero_seconds  # noqa: E402

# Each tokenizer, and the eos token zero-tokenize puts before the document.
EOS = {"gpt2": "<|endoftext|>", "gpt2-style": "<|endoftext|>", "llama3-style": "<|end_of_text|>",
       "smollm2-style": "<|im_end|>", "qwen2-style": "<|endoftext|>"}

args = arguments("austen", "/tmp/zero-hf-tokenizer-bench")
made = os.path.join(args.work, "hf")
if not os.path.exists(os.path.join(made, "manifest.json")):
    subprocess.run([sys.executable, os.path.join(REPO, "tests", "data", "make_hf_tokenizers.py"),
                    made], check=True, stdout=subprocess.DEVNULL)
path, raw = corpus_file(args)
text = raw.decode("utf-8")
paragraphs = [p + "\n\n" for p in text.split("\n\n")]
megabytes = len(raw) / 1e6
cpu_name, simd = cpu()
print(f"bench_hf_tokenizer corpus={args.corpus} MB={megabytes:.2f} paragraphs={len(paragraphs)} "
      f"cpu='{cpu_name}' simd='{simd}' tokenizers={tokenizers.__version__} threads=1")


def zero_run(name):
    out_path = os.path.join(args.work, name + ".bin")
    seconds = zero_seconds(args.zero_tokenize, ["--tokenizer", os.path.join(made, name), path,
                                                "--out", out_path, "--threads", "1"])
    return seconds, out_path


def token_file_ids(out_path):
    data = open(out_path, "rb").read()
    count = struct.unpack("<i", data[8:12])[0]
    return list(struct.unpack(f"<{count}H", data[1024:1024 + 2 * count]))


def megabytes_per_second(work):
    start = time.perf_counter()
    work()
    return megabytes / (time.perf_counter() - start)


summary = []
for name, eos in EOS.items():
    library = tokenizers.Tokenizer.from_file(os.path.join(made, name, "tokenizer.json"))
    expected = library.encode(text, add_special_tokens=False).ids  # also the warm-up
    if token_file_ids(zero_run(name)[1]) != [library.token_to_id(eos)] + expected:
        sys.exit(f"{name}: zero-tokenize's ids differ from the library's")
    one, batch, zero = [], [], []
    for r in range(args.rounds):
        one.append(megabytes_per_second(lambda: library.encode(text, add_special_tokens=False)))
        batch.append(megabytes_per_second(
            lambda: library.encode_batch(paragraphs, add_special_tokens=False)))
        zero.append(megabytes / zero_run(name)[0])
        print(f"bench_hf_tokenizer {name} round={r} tokenizers_1t={one[-1]:.2f} "
              f"tokenizers_batch_1t={batch[-1]:.2f} zero_1t={zero[-1]:.2f} MB/s")
    summary.append((name, statistics.median(one), statistics.median(batch),
                    statistics.median(zero)))
for name, one, batch, zero in summary:
    print(f"bench_hf_tokenizer median {name:14s} tokenizers_1t={one:6.2f} "
          f"tokenizers_batch_1t={batch:6.2f} zero_1t={zero:6.2f} MB/s "
          f"ratio={zero / one:.1f} ratio_batch={zero / batch:.1f}")
