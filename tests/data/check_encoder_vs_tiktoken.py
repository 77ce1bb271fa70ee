#!/usr/bin/env python3
"""zero-tokenize against tiktoken, id for id (ctest encoder_vs_tiktoken).

    check_encoder_vs_tiktoken.py ZERO_TOKENIZE DATA_DIR WORK_DIR

The reference is tiktoken's Rust core with GPT-2's pattern and ranks built from the same
local encoder.json and vocab.bpe (no download), i.e. r50k_base. Cases:
  - the three corpora of data/corpus (Moby-Dick, six Austen novels, the State of the Union
    addresses), each one document, on 2 threads;
  - 400 fuzzed samples (seeded): words, contractions in every case, whitespace runs (spaces,
    tabs, CR LF, NBSP, ideographic space, trailing), emoji (ZWJ sequences, flags, skin tones),
    combining marks, CJK, Arabic and Devanagari, Unicode digits, punctuation, and ill-formed
    UTF-8 (stray continuation bytes, truncated, overlong and surrogate forms, bytes F5-FF),
    each a file, encoded with --replace-invalid against tiktoken on the text as Python's
    bytes.decode("utf-8", "replace") gives it; and decode(encode(x)) == x for the valid ones.
Skips (exit 77, ctest's SKIP_RETURN_CODE, with a line) when tiktoken is not installed.
"""
import array
import lzma
import os
import random
import subprocess
import sys

try:
    import tiktoken
    import tiktoken.load
except ImportError:
    print("SKIPPED: the tiktoken package is not installed (scripts/setup.sh installs it)")
    sys.exit(77)

zero_tokenize, data_dir, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
    os.path.join(data_dir, "gpt2", "vocab.bpe"), os.path.join(data_dir, "gpt2", "encoder.json"))
PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
reference = tiktoken.Encoding("gpt2-local", pat_str=PATTERN, mergeable_ranks=ranks,
                              special_tokens={"<|endoftext|>": 50256})
decoder = {rank: token for token, rank in ranks.items()}
failures = 0


def read_tokens(path):
    with open(path, "rb") as f:
        header = array.array("i", f.read(1024))
        assert header[0] == 20240520 and header[1] == 1, path
        ids = array.array("H", f.read())
    assert len(ids) == header[2], path
    return list(ids)


def zero(inputs, out, *flags):
    subprocess.run([zero_tokenize, *inputs, "--out", out, "--encoder",
                    os.path.join(data_dir, "gpt2", "encoder.json"), "--vocab",
                    os.path.join(data_dir, "gpt2", "vocab.bpe"), *flags],
                   check=True, stdout=subprocess.DEVNULL)
    return read_tokens(out)


def compare(name, got, expected):
    global failures
    if got == expected:
        print(f"[{name}] ok: {len(got)} tokens")
        return
    failures += 1
    first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b),
                 min(len(got), len(expected)))
    print(f"[{name}] FAILED: {len(got)} tokens, expected {len(expected)}; first difference at "
          f"{first}: {got[first:first + 8]} vs {expected[first:first + 8]}")


for corpus in ("moby-dick", "austen", "sotu"):
    path = os.path.join(work, corpus + ".txt")
    with lzma.open(os.path.join(data_dir, "corpus", corpus + ".txt.xz")) as f:
        text = f.read()
    with open(path, "wb") as f:
        f.write(text)
    compare(corpus, zero([path], os.path.join(work, corpus + ".bin"), "--threads", "2"),
            [50256] + reference.encode_ordinary(text.decode("utf-8")))

rng = random.Random(20261126)
WORDS = ["the", "whale", "Ishmael", "don", "DON", "it", "I", "we", "they", "a", "x" * 40,
         "naïve", "café", "Straße", "über", "日本語", "中文", "한국어", "ελληνικά", "русский",
         "العربية", "हिन्दी", "mañana", "e\u0301", "a\u0308\u0323", "1999", "٣٤٥", "½", "Ⅻ"]
APOSTROPHES = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ll", "'x", "''"]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\n\n\n", "\u00a0", "\u3000", "\u2009", " \t ", "      "]
EMOJI = ["🌍", "👨‍👩‍👧‍👦", "🇫🇷", "👍🏽", "🧑‍💻", "❤️", "😺"]
PUNCT = [".", ",", "!?", "...", "—", "«", "»", "(", ")", "$", "%", "&&", "->", "#", "@", "\\", "~~"]
INVALID = [b"\x80", b"\xbf\xbf", b"\xc0\x80", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf0\x9f\x98",
           b"\xf4\x90\x80\x80", b"\xff", b"\xfe\xff", b"\xc3", b"\xe2\x82"]
samples_dir = os.path.join(work, "fuzz")
os.makedirs(samples_dir, exist_ok=True)
for old in os.listdir(samples_dir):
    os.remove(os.path.join(samples_dir, old))
expected = []
valid = []
for i in range(400):
    parts = []
    for _ in range(rng.randint(1, 30)):
        kind = rng.random()
        if kind < 0.35:
            parts.append(rng.choice(WORDS).encode())
        elif kind < 0.5:
            parts.append(rng.choice(APOSTROPHES).encode())
        elif kind < 0.7:
            parts.append(rng.choice(SPACES).encode())
        elif kind < 0.78:
            parts.append(rng.choice(EMOJI).encode())
        elif kind < 0.9:
            parts.append(rng.choice(PUNCT).encode())
        elif kind < 0.97:
            parts.append(rng.choice(INVALID))
        else:
            parts.append(bytes(rng.randint(1, 255) for _ in range(rng.randint(1, 6))))
    sample = b"".join(parts)
    with open(os.path.join(samples_dir, f"sample_{i:04d}.txt"), "wb") as f:
        f.write(sample)
    text = sample.decode("utf-8", "replace")
    ids = reference.encode_ordinary(text)
    expected += [50256] + ids
    try:
        sample.decode("utf-8")
        valid.append((ids, sample))
    except UnicodeDecodeError:
        pass
compare("fuzz (400 samples, --replace-invalid)",
        zero([samples_dir], os.path.join(work, "fuzz.bin"), "--replace-invalid"), expected)
round_trip = sum(1 for ids, sample in valid if b"".join(decoder[t] for t in ids) == sample)
print(f"[round trip] {round_trip} of {len(valid)} valid samples decode to themselves")
if round_trip != len(valid):
    failures += 1
print(f"{failures} failing case(s)")
sys.exit(1 if failures else 0)
