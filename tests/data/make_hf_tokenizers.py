#!/usr/bin/env python3
"""Hugging Face tokenizer.json files and their ids, made with the `tokenizers` library, for
test_hf_tokenizer (ctest hf_tokenizer):

    tests/data/make_hf_tokenizers.py WORK_DIR

Trains byte-level BPE tokenizers (BpeTrainer) on part of data/corpus/moby-dick, as GPT-2,
Llama 3, SmolLM2 and Qwen2 configure theirs, and one with a Split regex zero does not know
(cut only at added tokens by encode_parallel); builds small ones by hand whose merges differ
from "the piece is a token" (with and without ignore_merges, with unk_token and without), and
converts GPT-2's own vocabulary (data/gpt2). Each is WORK_DIR/NAME/tokenizer.json with a
tokenizer_config.json (bos/eos) beside it. Then encodes held-out text (other corpora, and
tricky strings: contractions, digit runs, CRLF, tabs, spaces, emoji, CJK, combining marks,
Unicode 16 letters, the added tokens inside text, fuzzed code points) with the library, and
writes WORK_DIR/manifest.json:
  texts: the texts encoded;
  tokenizers: [{name, dir, bos, eos, vocab_size, space_cuts,
                cases: [{text (an index into texts), ids, decoded (when not the text)}
                        or {text, error}]}]
  gpt2: the converted GPT-2 directory; corpus: the corpus files (decompressed)
  bad: [{name, dir, message}]: tokenizer files zero must refuse with that message
  classes: what the library's regex engine counts as \\s, \\p{L} and \\p{N}, as code point ranges
"""
import copy
import json
import lzma
import os
import random
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
          r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
         r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
UNKNOWN_SPLIT = r"\p{L}+|\p{N}+|[^\p{L}\p{N}]+"

work = sys.argv[1]
repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
data = os.path.join(repo, "data")
os.makedirs(work, exist_ok=True)


def corpus(name):
    """data/corpus/NAME.txt.xz decompressed into WORK_DIR (test_hf_tokenizer reads it too)."""
    path = os.path.join(work, name + ".txt")
    with lzma.open(os.path.join(data, "corpus", name + ".txt.xz"), "rt", encoding="utf-8",
                   newline="") as f:
        text = f.read()
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    return text


moby, austen, sotu = corpus("moby-dick"), corpus("austen"), corpus("sotu")
training = moby[:600_000]


def trained(pre_tokenizer, specials, vocab_size=3000, ignore_merges=False, normalizer=None):
    tokenizer = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer is not None:
        tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator([training], trainer)
    return tokenizer


def byte_level(use_regex):
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=use_regex)


def split(pattern):
    return pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)


def handmade(ignore_merges, unk=None, fuse_unk=False):
    """A small vocabulary whose merges do not make every token: "abc" is a token, but the merges
    (b c, then a b) turn "abc" into [a, bc]; with ignore_merges it is [abc]. Only some bytes are
    tokens: the others are dropped, or become unk_token."""
    symbols = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["Ġ", ".", "1", "2"]
    vocab = {s: i for i, s in enumerate(symbols)}
    merges = [("b", "c"), ("a", "b"), ("Ġ", "a"), ("Ġa", "bc"), ("1", "2"), ("12", "1")]
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    vocab.setdefault("abc", len(vocab))
    if unk is not None:
        vocab[unk] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges,
                                     unk_token=unk, fuse_unk=fuse_unk))
    tokenizer.pre_tokenizer = byte_level(True)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def gpt2_converted():
    """GPT-2's own vocabulary as tokenizers' BPE (what openai-community/gpt2 ships)."""
    tokenizer = Tokenizer(models.BPE.from_file(os.path.join(data, "gpt2", "encoder.json"),
                                               os.path.join(data, "gpt2", "vocab.bpe")))
    tokenizer.pre_tokenizer = byte_level(True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<|endoftext|>"])
    return tokenizer


made = {}  # name -> (tokenizer, tokenizer_config, NFC)


def add(name, tokenizer, config, nfc=False):
    made[name] = (tokenizer, config, nfc)


gpt2_style = trained(byte_level(True), ["<|endoftext|>"])
gpt2_style.add_special_tokens(["<|im_start|>", "<|im_end|>", "<|im"])
# Normalized (non-special) added tokens are matched after the raw ones, in the text between.
gpt2_style.add_tokens(["start|>", "Captain Ahab", " whale-ship"])
add("gpt2-style", gpt2_style, {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"})

llama3_style = trained(pre_tokenizers.Sequence([split(LLAMA3), byte_level(False)]),
                       ["<|begin_of_text|>", "<|end_of_text|>"], vocab_size=4000,
                       ignore_merges=True)
llama3_style.add_special_tokens([f"<|reserved_special_token_{i}|>" for i in range(8)])
add("llama3-style", llama3_style,
    {"bos_token": "<|begin_of_text|>",
     "eos_token": {"__type": "AddedToken", "content": "<|end_of_text|>", "lstrip": False,
                   "normalized": False, "rstrip": False, "single_word": False}})

smollm2_style = trained(pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 byte_level(True)]),
                        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
add("smollm2-style", smollm2_style, {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"})

qwen2_style = trained(pre_tokenizers.Sequence([split(QWEN2), byte_level(False)]),
                      ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                      normalizer=normalizers.NFC())
add("qwen2-style", qwen2_style, {"bos_token": None, "eos_token": "<|endoftext|>"}, nfc=True)

digit_runs = trained(pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=False),
                                              split(UNKNOWN_SPLIT), byte_level(False)]),
                     ["<|endoftext|>"])
add("unknown-split", digit_runs, {"eos_token": "<|endoftext|>"})

add("handmade", handmade(False), {})
add("handmade-ignore-merges", handmade(True), {})
add("handmade-unk", handmade(False, unk="<unk>"), {})
add("handmade-fused-unk", handmade(True, unk="<unk>", fuse_unk=True), {})
add("gpt2", gpt2_converted(), {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"})


def fuzz(seed, count, length):
    """Strings of code points drawn from pools the pre-tokenizers treat differently."""
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " ", "  \t\n\r",
        "'sStTdDmMlLvVrReE", ".,;:!?-_()[]{}\"'/\\@#$%^&*+=<>|~`",
        "\u00a0\u0085\u1680\u180e\u2000\u2007\u200a\u2028\u2029\u202f\u205f\u3000\u200b\ufeff",
        "éüßçñøÅÆ\u017f\u212a", "日本語中文한국어ไทย", "😀👍🏽🚀\u200d", "\u0301\u0300\u0303\u0308",
        "٣٤٥١２３\u2164\u00b2\u00bd", "".join(map(chr, [0x105C0, 0x10D4A, 0x1E4D0, 0x2EBF0, 0x31350,
                                                     0x10D40, 0x1E5F1, 0x11BF0, 0x1C89])),
        "<|>endoftextim_start", "\x00\x01\x1b\x7f",
    ]
    out = []
    for _ in range(count):
        out.append("".join(rng.choice(rng.choice(pools)) for _ in range(length)))
    return out


specials = "<|endoftext|>"
TRICKY = [
    "", "Hello world", "It's a test, isn't it? I'm sure they'll've done what you'd do.",
    "'S 'T 'RE 'VE 'M 'LL 'D 's't're've'm'll'd", "It'\u017f and IT'\u212a",
    "1234567890 3.14159 and 2,718,281,828", "12 345 6789 0 x1y22z333w4444", "9" * 700,
    "a\r\nb\r\n\r\nc\n\n\n d \n \n", "\t\tindented\ttabs\t", "multiple     spaces   here",
    "trailing spaces   ", "   leading", " ", "\n", "line\u00a0nbsp and\u0085nel",
    "\u3000ideographic\u3000space", "mongolian\u180evowel\u180e separator",
    "😀👍🏽 family: 👨‍👩‍👧‍👦!", "日本語のテキストと中文文本、한국어", "हिन्दी العربية ελληνικά",
    "e\u0301 a\u0300 n\u0303 combining", "٣٤٥ and １２３ and \u2164",
    "\U000105C0\U000105C1 \U0002EBF0x \U00010D40\U00010D41 \U0001E5F1",
    "a" * 3000, "ab" * 1500, " " * 300 + "x", "x" + "y" * 200, "abc ab abcabc bcd a.b.c 121212",
    specials, "a" + specials + "b", specials + specials + "   " + specials,
    "hello   " + specials + "   world", "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>",
    "<|im_star <|im <|endoftext <|begin_of_text|>x<|end_of_text|>",
    "xstart|>y <|im_start|> Captain Ahab's whale-ship and the whale-ship",
    "<|reserved_special_token_3|><|reserved_special_token_30|>", "\x00\x01\x1b\x7f",
]


def held_out(text, size):
    """A slice from the middle, ended at a line break."""
    start = text.index("\n", len(text) // 2) + 1
    return text[start:text.index("\n", start + size) + 1]


def first_above(text, limit=0x300):
    """(code point, byte offset) of the first character from `limit` up, or None."""
    offset = 0
    for ch in text:
        if ord(ch) >= limit:
            return ord(ch), offset
        offset += len(ch.encode("utf-8"))
    return None


BIG_TEXTS = [held_out(austen, 100_000), held_out(sotu, 100_000)]
# Text with the added tokens between its paragraphs (encode_parallel cuts at them).
MARKED = "".join(p + ("<|endoftext|>" if i % 7 == 0 else "<|im_start|>" if i % 11 == 0 else "")
                 for i, p in enumerate(held_out(moby, 150_000).split("\n\n")))
CASES = TRICKY + fuzz(1, 40, 120) + BIG_TEXTS + [MARKED]

manifest = {"tokenizers": [], "bad": [], "gpt2": os.path.join(work, "gpt2"), "texts": [],
            "corpus": {name: os.path.join(work, name + ".txt")
                       for name in ("moby-dick", "austen", "sotu")}}
text_index = {}


def text_id(text):
    """The index of `text` in manifest["texts"] (each text stored once)."""
    if text not in text_index:
        text_index[text] = len(manifest["texts"])
        manifest["texts"].append(text)
    return text_index[text]


for name, (tokenizer, config, nfc) in made.items():
    directory = os.path.join(work, name)
    os.makedirs(directory, exist_ok=True)
    tokenizer.save(os.path.join(directory, "tokenizer.json"))
    if config:
        with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
            json.dump(config, f)
    reloaded = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    cases = []
    for text in CASES:
        bad = first_above(text) if nfc else None
        if bad is not None:
            # zero refuses what NFC would have to look at; the same text with the
            # characters from U+0300 up replaced is still compared.
            cases.append({"text": text_id(text), "error": "U+%04X at byte offset %d" % bad})
            text = "".join(ch if ord(ch) < 0x300 else "'" for ch in text)
        ids = reloaded.encode(text, add_special_tokens=False).ids
        case = {"text": text_id(text), "ids": ids}
        decoded = reloaded.decode(ids, skip_special_tokens=False)
        if decoded != text:  # bytes that are no token, unk_token
            case["decoded"] = decoded
        cases.append(case)

    def token_id(key):
        value = config.get(key)
        if isinstance(value, dict):
            value = value["content"]
        return None if value is None else reloaded.token_to_id(value)

    vocab = reloaded.get_vocab(with_added_tokens=True)
    manifest["tokenizers"].append({
        "name": name, "dir": directory, "bos": token_id("bos_token"), "eos": token_id("eos_token"),
        "vocab_size": max(vocab.values()) + 1, "cases": cases,
        # Whether encode_parallel may also cut at spaces (GPT-2's, Llama 3's, Qwen2's regex).
        "space_cuts": name not in ("unknown-split",)})


def bad(name, message, edit=None, text=None, config=None):
    """A copy of gpt2-style with `edit` applied to its JSON (or `text` as the file)."""
    directory = os.path.join(work, "bad", name)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(work, "gpt2-style", "tokenizer.json")) as f:
        tokenizer = json.load(f)
    if edit is not None:
        edit(tokenizer)
    with open(os.path.join(directory, "tokenizer.json"), "w") as f:
        f.write(text if text is not None else json.dumps(tokenizer))
    if config is not None:
        with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
            json.dump(config, f)
    manifest["bad"].append({"name": name, "dir": directory, "message": message})


def setter(*path_and_value):
    *path, value = path_and_value

    def edit(tokenizer):
        node = tokenizer
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = copy.deepcopy(value)
    return edit


def sequence(*steps):
    return {"type": "Sequence", "pretokenizers": list(steps)}


BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
              "use_regex": True}
SPLIT = {"type": "Split", "pattern": {"Regex": r"\p{L}+"}, "behavior": "Isolated",
         "invert": False}
bad("nfkc", 'normalizer.type = "NFKC" is not supported', setter("normalizer", {"type": "NFKC"}))
bad("lowercase-in-sequence", 'normalizer.normalizers[1].type = "Lowercase" is not supported',
    setter("normalizer", {"type": "Sequence", "normalizers": [{"type": "NFC"},
                                                               {"type": "Lowercase"}]}))
bad("whitespace", 'pre_tokenizer.type = "Whitespace" is not supported',
    setter("pre_tokenizer", {"type": "Whitespace"}))
bad("metaspace", 'pre_tokenizer.pretokenizers[0].type = "Metaspace" is not supported',
    setter("pre_tokenizer", sequence({"type": "Metaspace", "replacement": "_",
                                      "prepend_scheme": "always", "split": True}, BYTE_LEVEL)))
bad("no-pre-tokenizer", "pre_tokenizer = null is not supported", setter("pre_tokenizer", None))
bad("prefix-space", "pre_tokenizer.add_prefix_space = true is not supported",
    setter("pre_tokenizer", dict(BYTE_LEVEL, add_prefix_space=True)))
bad("byte-level-first", "ByteLevel must be the last step",
    setter("pre_tokenizer", sequence(BYTE_LEVEL, {"type": "Digits", "individual_digits": True})))
bad("no-byte-level", "ByteLevel must be the last step", setter("pre_tokenizer", sequence(SPLIT)))
bad("split-removed", 'pre_tokenizer.pretokenizers[0].behavior = "Removed" is not supported',
    setter("pre_tokenizer", sequence(dict(SPLIT, behavior="Removed"), BYTE_LEVEL)))
bad("split-invert", "pre_tokenizer.pretokenizers[0].invert = true is not supported",
    setter("pre_tokenizer", sequence(dict(SPLIT, invert=True), BYTE_LEVEL)))
bad("split-string", 'pre_tokenizer.pretokenizers[0].pattern = {"String":" "} is not supported',
    setter("pre_tokenizer", sequence(dict(SPLIT, pattern={"String": " "}), BYTE_LEVEL)))
bad("split-empty-match", "pre_tokenizer.pretokenizers[0].pattern.Regex = \"a*\" can match the "
    "empty string", setter("pre_tokenizer", sequence(dict(SPLIT, pattern={"Regex": "a*"}),
                                                     BYTE_LEVEL)))
bad("split-bad-regex", "pre_tokenizer.pretokenizers[0].pattern.Regex: the regex does not compile",
    setter("pre_tokenizer", sequence(dict(SPLIT, pattern={"Regex": "(ab"}), BYTE_LEVEL)))
bad("byte-fallback", "model.byte_fallback = true is not supported (supported: false)",
    setter("model", "byte_fallback", True))
bad("dropout", "model.dropout = 0.1 is not supported (supported: null)",
    setter("model", "dropout", 0.1))
bad("subword-prefix", 'model.continuing_subword_prefix = "##" is not supported',
    setter("model", "continuing_subword_prefix", "##"))
bad("word-suffix", 'model.end_of_word_suffix = "</w>" is not supported',
    setter("model", "end_of_word_suffix", "</w>"))
bad("wordpiece", 'model.type = "WordPiece" is not supported', setter("model", "type", "WordPiece"))
bad("merge-three-parts", 'model.merges[2] = "a b c" is malformed',
    lambda t: t["model"]["merges"].__setitem__(2, "a b c"))
bad("merge-one-part", 'model.merges[0] = ["th"] is malformed',
    lambda t: t["model"]["merges"].__setitem__(0, ["th"]))
bad("merge-unknown", 'model.merges[1] = ["q","éé"]: "éé" is not in model.vocab',
    lambda t: t["model"]["merges"].__setitem__(1, ["q", "éé"]))
bad("vocab-duplicate-id", "(each id must name one token)",
    lambda t: t["model"]["vocab"].__setitem__("zzzzzz", 5))
bad("lstrip", "added_tokens[0].lstrip = true is not supported",
    lambda t: t["added_tokens"][0].__setitem__("lstrip", True))
bad("single-word", "added_tokens[1].single_word = true is not supported",
    lambda t: t["added_tokens"][1].__setitem__("single_word", True))
bad("truncation", "truncation = {", setter("truncation", {"max_length": 8, "strategy":
                                                          "LongestFirst", "stride": 0,
                                                          "direction": "Right"}))
bad("decoder", 'decoder.type = "WordPiece" is not supported',
    setter("decoder", {"type": "WordPiece", "prefix": "##", "cleanup": True}))
bad("not-json", "invalid JSON", text="{\"model\": ")
bad("not-an-object", "the top level = [1,2] must be a JSON object", text="[1, 2]")
bad("no-model", "model is missing", lambda t: t.pop("model"))
bad("eos-unknown", 'eos_token = "<nope>" is no token', config={"eos_token": "<nope>"})
bad("bos-number", "bos_token = 7 must be a token string", config={"bos_token": 7})

# What the library's regex engine (Oniguruma) matches with \s, \p{L} and \p{N}, as ranges.
everything = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
text = "".join(map(chr, everything))
classes = {}
for name, pattern in (("s", r"\s"), ("L", r"\p{L}"), ("N", r"\p{N}")):
    kept = bytearray(len(everything))
    for _, (begin, end) in pre_tokenizers.Split(Regex(pattern), "removed").pre_tokenize_str(text):
        kept[begin:end] = b"\x01" * (end - begin)
    ranges = []
    for index, code_point in enumerate(everything):
        if kept[index]:
            continue
        if ranges and ranges[-1][1] == code_point - 1:
            ranges[-1][1] = code_point
        else:
            ranges.append([code_point, code_point])
    classes[name] = ranges
manifest["classes"] = classes

with open(os.path.join(work, "manifest.json"), "w") as f:
    f.write(json.dumps(manifest))
print(f"made {len(made)} tokenizers, {len(manifest['bad'])} bad files, "
      f"{len(CASES)} texts each, in {work}")
