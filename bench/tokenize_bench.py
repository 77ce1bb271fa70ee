"""What the zero-tokenize benchmarks share (bench/encoder_vs_tiktoken.py,
bench/bench_hf_tokenizer.py): their command line, the corpus as a file, the CPU's name, and
zero-tokenize's encoding time."""
import argparse
import lzma
import os
import re
import subprocess

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def arguments(corpus, work):
    """--corpus (default `corpus`), --rounds, --zero-tokenize and --work (default `work`)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", default=corpus)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--zero-tokenize", default="build/bin/zero-tokenize")
    parser.add_argument("--work", default=work)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    return args


def corpus_file(args):
    """data/corpus/CORPUS.txt.xz decompressed into WORK: (its path, its bytes)."""
    with lzma.open(os.path.join(REPO, "data", "corpus", args.corpus + ".txt.xz")) as f:
        raw = f.read()
    path = os.path.join(args.work, args.corpus + ".txt")
    with open(path, "wb") as f:
        f.write(raw)
    return path, raw


def cpu():
    """(model name, its SIMD extensions that matter here) from /proc/cpuinfo."""
    lines = open("/proc/cpuinfo").read().splitlines()
    name = next((l.split(":", 1)[1].strip() for l in lines if l.startswith("model name")), "?")
    flags = next((l.split(":", 1)[1].split() for l in lines if l.startswith("flags")), [])
    simd = " ".join(f for f in flags if f in ("avx2", "avx512f", "avx512bw", "avx512_bf16",
                                              "amx_tile"))
    return name, simd


def zero_seconds(zero_tokenize, arguments):
    """The encoding time zero-tokenize reports for `arguments` (without its start-up, loading
    the encoder and writing the file)."""
    out = subprocess.run([zero_tokenize] + arguments, check=True, capture_output=True, text=True)
    return float(re.search(r"in ([0-9.]+) s", out.stdout).group(1))
