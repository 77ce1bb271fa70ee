// Text files -> llm.c token files, with GPT-2's encoder (zero/tokenizer.h) or a Hugging Face
// tokenizer (zero/hf_tokenizer.h): what zero-tokenize and zero-train --data FILE.txt do. Each
// text file is one document, preceded by a separator token: <|endoftext|> (50256) with GPT-2's
// encoder, as GPT-2's and llm.c's data are, the tokenizer's eos token with a Hugging Face one.
// The token files are those zero::TokenFile reads (zero/data.h): uint16 ids, or uint32 ids
// (llm.c's Llama 3 format) for a tokenizer of more than 65536 ids (token_file_format_for).
#pragma once

#include "zero/export.h"
#include "zero/hf_tokenizer.h"
#include "zero/tokenizer.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace zero {

/// The text files `inputs` name, in order: a regular file as itself, a directory as every
/// `*.txt` file under it (recursively), in byte order of their paths. Throws zero::Error naming
/// an input that does not exist or a directory without any `*.txt` file.
ZERO_API std::vector<std::string> list_text_files(const std::vector<std::string>& inputs);

struct ZERO_API TokenizeOptions {
  /// The last this fraction of the tokens (of all documents, in order) go to the validation
  /// file PREFIX_val.bin, the rest to PREFIX_train.bin; 0 writes one file, `out` itself.
  double val_fraction = 0.0;
  /// Encoder threads (0: the machine's cores).
  int threads = 0;
  /// Replace ill-formed UTF-8 by U+FFFD (each maximal subpart, as Python's "replace") instead
  /// of refusing the file.
  bool replace_invalid = false;
  /// Called now and then with the bytes encoded so far and in all.
  std::function<void(int64_t done, int64_t total)> progress;
};

struct ZERO_API TokenizeResult {
  std::vector<std::string> files;  // what was written: `out`, or PREFIX_train.bin, PREFIX_val.bin
  int64_t documents = 0;
  int64_t bytes = 0;   // of text
  int64_t tokens = 0;  // written, separators (<|endoftext|>) included
  int64_t val_tokens = 0;
  int32_t bytes_per_token = 2;  // of the files written: 2 (uint16 ids) or 4 (uint32 ids)
  double seconds = 0;  // encoding only
};

/// Encodes `files` (each one document: <|endoftext|>, then its tokens) and writes the token
/// file(s) atomically. With val_fraction > 0, `out` is a prefix: PREFIX_train.bin and
/// PREFIX_val.bin. Throws zero::Error naming the file (and the byte offset) for a file that is
/// unreadable, empty, binary (a NUL byte) or not UTF-8, before anything is written.
ZERO_API TokenizeResult tokenize_text_files(const std::vector<std::string>& files,
                                            const GPT2Encoder& encoder, const std::string& out,
                                            const TokenizeOptions& options = {});
/// The same with a Hugging Face tokenizer: each document preceded by the tokenizer's eos token
/// (tokenizer_config.json's eos_token), or by nothing when it has none. A vocab_size() above
/// 65536 writes uint32 ids.
ZERO_API TokenizeResult tokenize_text_files(const std::vector<std::string>& files,
                                            const HfTokenizer& tokenizer, const std::string& out,
                                            const TokenizeOptions& options = {});

/// zero-train --data for text: `input` (a .txt file, or a directory of them) tokenized into
/// INPUT.zero-tokens/ (a directory beside it) as data_train.bin and data_val.bin, the last
/// `val_fraction` of the tokens for validation. Cached: a second call with unchanged inputs
/// (the same files with the same sizes, modification times and CRC-32s, recorded in
/// INPUT.zero-tokens/manifest.json) and the same split reads nothing but the manifest and the
/// inputs' checksums; a changed input is tokenized again. Returns the prefix to load
/// (INPUT.zero-tokens/data) and sets `*note` to what was done ("tokenized ..." or "using ...").
ZERO_API std::string prepare_text_data(const std::string& input, const GPT2Encoder& encoder,
                                       double val_fraction, int threads, std::string* note,
                                       const std::function<void(int64_t, int64_t)>& progress = {});

/// The same with a Hugging Face tokenizer (documents separated as tokenize_text_files does);
/// the manifest also records the tokenizer (its tokenizer.json's size and CRC-32, and the
/// separator), so tokens made with another tokenizer are not reused.
ZERO_API std::string prepare_text_data(const std::string& input, const HfTokenizer& tokenizer,
                                       double val_fraction, int threads, std::string* note,
                                       const std::function<void(int64_t, int64_t)>& progress = {});

/// Whether `path` names text to tokenize rather than a token-file prefix: a directory, or a
/// file ending in ".txt".
ZERO_API bool is_text_data(const std::string& path);

/// The prefix prepare_text_data returns for `input`, without doing anything (for the ranks
/// that wait while one prepares).
ZERO_API std::string text_data_prefix(const std::string& input);

}  // namespace zero
