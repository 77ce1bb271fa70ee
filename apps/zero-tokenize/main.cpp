// zero-tokenize: text files -> one llm.c token file (or a train/validation pair), with GPT-2's
// byte-level BPE (zero::GPT2Encoder: tiktoken's ids) or a Hugging Face tokenizer.json
// (zero::HfTokenizer: the tokenizers library's ids), over every core.
//
//   zero-tokenize INPUT... --out FILE.bin [--val-fraction F] [--threads T]
//                 [--encoder data/gpt2/encoder.json] [--vocab data/gpt2/vocab.bpe]
//                 [--tokenizer DIR_OR_TOKENIZER_JSON]
//
// INPUT: text files, or directories (their *.txt files, recursively, in name order). Each file
// is one document, preceded by <|endoftext|> (50256), or with --tokenizer by the tokenizer's
// eos token (tokenizer_config.json's eos_token; nothing without one). Token files hold uint16
// ids (GPT-2's llm.c format), or uint32 ids (llm.c's Llama 3 format) for a tokenizer of more
// than 65536 ids (Llama 3's, Qwen2's). With --val-fraction F > 0, --out is a
// prefix: the last F of the tokens go to PREFIX_val.bin and the rest to PREFIX_train.bin (what
// zero-train --data PREFIX reads). A bad input (missing, unreadable, empty, binary, not UTF-8)
// is one message naming the file (and the byte offset), exit status 2, nothing written.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "zero/console.h"
#include "zero/hf_tokenizer.h"
#include "zero/text_corpus.h"
#include "zero/tokenizer.h"

int main(int argc, char** argv) {
  std::vector<std::string> inputs;
  std::string out;
  double val_fraction = 0.0;
  int threads = 0;
  std::string encoder_path = "data/gpt2/encoder.json";
  std::string vocab_path = "data/gpt2/vocab.bpe";
  std::string tokenizer_path;
  CLI::App app{"zero-tokenize: text files -> an llm.c token file, with GPT-2's BPE or a "
               "Hugging Face tokenizer.json"};
  app.add_option("inputs", inputs, "text files, or directories of .txt files")->required();
  app.add_option("--out", out, "token file (with --val-fraction: the prefix of two)")->required();
  app.add_option("--val-fraction", val_fraction,
                 "the last this fraction of the tokens to PREFIX_val.bin, the rest to "
                 "PREFIX_train.bin (0: one file)")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app.add_option("--threads", threads, "encoder threads (default: every core)")
      ->check(CLI::Range(0, cores));
  bool replace_invalid = false;
  app.add_flag("--replace-invalid", replace_invalid,
               "replace ill-formed UTF-8 by U+FFFD (as Python's bytes.decode(\"utf-8\", "
               "\"replace\")) instead of refusing the file");
  CLI::Option* encoder_option =
      app.add_option("--encoder", encoder_path, "GPT-2 encoder.json")->capture_default_str();
  CLI::Option* vocab_option =
      app.add_option("--vocab", vocab_path, "GPT-2 vocab.bpe")->capture_default_str();
  app.add_option("--tokenizer", tokenizer_path,
                 "a Hugging Face byte-level BPE tokenizer instead of GPT-2's: a directory with "
                 "tokenizer.json (and tokenizer_config.json for its eos token), or the file")
      ->excludes(encoder_option)
      ->excludes(vocab_option);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "zero-tokenize: error: %s\nRun with --help for more information.\n",
                 e.what());
    return 2;
  }
  try {
    // One of the two; the other stays empty.
    std::optional<zero::GPT2Encoder> encoder;
    std::optional<zero::HfTokenizer> tokenizer;
    if (tokenizer_path.empty()) {
      encoder = zero::GPT2Encoder::load(encoder_path, vocab_path);
    } else {
      tokenizer = zero::HfTokenizer::load(tokenizer_path);
    }
    const std::vector<std::string> files = zero::list_text_files(inputs);
    zero::TokenizeOptions options;
    options.val_fraction = val_fraction;
    options.threads = threads;
    options.replace_invalid = replace_invalid;
    const bool terminal = zero::stdout_is_terminal();
    const auto started = std::chrono::steady_clock::now();
    options.progress = [&](int64_t done, int64_t total) {
      if (!terminal || total == 0) return;
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      const int width = 30;
      const int filled = static_cast<int>(width * done / total);
      std::printf("\r[%s%s] %5.1f%% %8.1f MB  %6.1f MB/s", std::string(filled, '#').c_str(),
                  std::string(width - filled, '.').c_str(), 100.0 * done / total, done / 1e6,
                  done / 1e6 / std::max(seconds, 1e-9));
      std::fflush(stdout);
    };
    const zero::TokenizeResult result =
        tokenizer ? zero::tokenize_text_files(files, *tokenizer, out, options)
                  : zero::tokenize_text_files(files, *encoder, out, options);
    if (terminal) std::printf("\n");
    std::printf("zero-tokenize: %lld file(s), %.2f MB of text -> %lld tokens (%lld validation) "
                "of %d bits in %.3f s (%.1f MB/s on %d thread(s)):",
                static_cast<long long>(result.documents), result.bytes / 1e6,
                static_cast<long long>(result.tokens), static_cast<long long>(result.val_tokens),
                8 * result.bytes_per_token, result.seconds,
                result.bytes / 1e6 / std::max(result.seconds, 1e-9),
                threads > 0 ? threads : cores);
    for (const std::string& file : result.files) std::printf(" %s", file.c_str());
    std::printf("\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zero-tokenize: error: %s\n", e.what());
    return 2;
  }
}
