// Text files -> token files (include/zero/text_corpus.h).
#include "zero/text_corpus.h"

#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <thread>

#include "common/bounded_input.h"
#include "data/utf8.h"
#include "zero/data.h"
#include "zero/error.h"
#include "zero/files.h"

namespace zero {
namespace {

namespace fs = std::filesystem;

// A text file is read whole; this bounds what one file may ask of memory (the ids take twice
// its size again while encoding).
constexpr int64_t kMaxTextBytes = int64_t{64} << 30;

std::string read_text(const std::string& path) {
  std::string text = read_regular_file(path, "text file", kMaxTextBytes);
  ZERO_CHECK(!text.empty(), "text file '", path, "' is empty");
  const void* nul = std::memchr(text.data(), '\0', text.size());
  ZERO_CHECK(nul == nullptr, "text file '", path, "' is a binary file, not text (a NUL byte at ",
             "byte offset ", static_cast<const char*>(nul) - text.data(), ")");
  return text;
}

struct Fingerprint {
  std::string path;
  int64_t size = 0;
  int64_t mtime_ns = 0;
  uint32_t crc32 = 0;
};

Fingerprint fingerprint(const std::string& path) {
  struct stat st {};
  ZERO_CHECK(::stat(path.c_str(), &st) == 0, "text file '", path, "': cannot stat: ",
             std::strerror(errno));
  Fingerprint f;
  f.path = path;
  f.size = st.st_size;
  f.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  const std::string text = read_regular_file(path, "text file", kMaxTextBytes);
  uLong crc = ::crc32(0L, Z_NULL, 0);
  for (size_t at = 0; at < text.size(); at += 1 << 30) {
    const size_t n = std::min<size_t>(text.size() - at, 1 << 30);
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(text.data() + at), static_cast<uInt>(n));
  }
  f.crc32 = static_cast<uint32_t>(crc);
  return f;
}

// What the token cache vouches for: the inputs, the split and (unless GPT-2's encoder made the
// tokens, whose manifests say nothing of it) the tokenizer.
nlohmann::json manifest_of(const std::vector<Fingerprint>& inputs, double val_fraction,
                           const nlohmann::json& tokenizer) {
  nlohmann::json files = nlohmann::json::array();
  for (const Fingerprint& f : inputs) {
    files.push_back({{"path", f.path}, {"size", f.size}, {"mtime_ns", f.mtime_ns},
                     {"crc32", f.crc32}});
  }
  nlohmann::json manifest = {{"format", "zero-text-tokens"}, {"version", 1},
                             {"val_fraction", val_fraction}, {"files", files}};
  if (!tokenizer.is_null()) manifest["tokenizer"] = tokenizer;
  return manifest;
}

// What tokenize_documents and prepare_documents need of a tokenizer.
struct DocumentEncoder {
  std::string name;  // for messages: "GPT-2's encoder", "tokenizer 'PATH'"
  int64_t vocab_size = 0;
  std::optional<int32_t> separator;  // the token before each document, if any
  // encode_parallel(text, threads, what, progress) of the tokenizer.
  std::function<std::vector<int32_t>(std::string_view, int, const std::string&,
                                     const std::function<void(int64_t)>&)>
      encode;
  // What the token cache's manifest records of the tokenizer (null: nothing, GPT-2's encoder).
  nlohmann::json identity;
};

DocumentEncoder document_encoder(const GPT2Encoder& encoder) {
  DocumentEncoder documents{"GPT-2's encoder", encoder.vocab_size(), GPT2Encoder::kEndOfText,
                            {}, nullptr};
  documents.encode = [&encoder](std::string_view text, int threads, const std::string& what,
                                const std::function<void(int64_t)>& progress) {
    return encoder.encode_parallel(text, threads, what, progress);
  };
  return documents;
}

// A Hugging Face tokenizer's tokens are those of its tokenizer.json's content and its
// separator: the cache keeps them for the same file wherever it lies.
DocumentEncoder document_encoder(const HfTokenizer& tokenizer) {
  const Fingerprint file = fingerprint(tokenizer.path());
  const std::optional<int32_t> eos = tokenizer.eos_id();
  DocumentEncoder documents{"tokenizer '" + tokenizer.path() + "'", tokenizer.vocab_size(), eos,
                            {},
                            {{"tokenizer_json_bytes", file.size},
                             {"tokenizer_json_crc32", file.crc32},
                             {"separator", eos ? nlohmann::json(*eos) : nlohmann::json()}}};
  documents.encode = [&tokenizer](std::string_view text, int threads, const std::string& what,
                                  const std::function<void(int64_t)>& progress) {
    return tokenizer.encode_parallel(text, threads, what, progress);
  };
  return documents;
}

TokenizeResult tokenize_documents(const std::vector<std::string>& files,
                                  const DocumentEncoder& encoder, const std::string& out,
                                  const TokenizeOptions& options) {
  ZERO_CHECK(options.val_fraction >= 0.0 && options.val_fraction < 1.0,
             "validation fraction ", options.val_fraction, " is outside [0, 1)");
  // uint16 ids when they fit (GPT-2's files, which llm.c reads too), uint32 for larger
  // vocabularies (Llama 3's 128256, Qwen2's 151936).
  const TokenFileFormat format = token_file_format_for(encoder.vocab_size);
  const int threads = options.threads > 0
                          ? options.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Every file checked (readable, text, UTF-8) before anything is encoded or written.
  int64_t total_bytes = 0;
  for (const std::string& path : files) {
    std::error_code error;
    const auto size = fs::file_size(path, error);
    ZERO_CHECK(!error, "text file '", path, "': ", error.message());
    total_bytes += static_cast<int64_t>(size);
  }
  TokenizeResult result;
  std::vector<uint32_t> ids;
  const auto started = std::chrono::steady_clock::now();
  int64_t done_before = 0;
  for (const std::string& path : files) {
    std::string text = read_text(path);
    if (options.replace_invalid) text = utf8::replace_invalid(text);
    const std::vector<int32_t> encoded =
        encoder.encode(text, threads, "text file '" + path + "'", [&](int64_t done) {
          if (options.progress) options.progress(done_before + done, total_bytes);
        });
    if (encoder.separator) ids.push_back(static_cast<uint32_t>(*encoder.separator));
    for (const int32_t id : encoded) ids.push_back(static_cast<uint32_t>(id));
    done_before += static_cast<int64_t>(text.size());
    ++result.documents;
    result.bytes += static_cast<int64_t>(text.size());
  }
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  result.tokens = static_cast<int64_t>(ids.size());
  ZERO_CHECK(result.tokens <= std::numeric_limits<int32_t>::max(), "the token file's header ",
             "counts tokens in an int32: ", result.tokens, " tokens do not fit (split the input)");
  result.bytes_per_token = format.bytes_per_token;
  if (options.val_fraction == 0.0) {
    write_file_atomically(out, token_file_bytes(ids.data(), result.tokens, format));
    result.files = {out};
    return result;
  }
  result.val_tokens = static_cast<int64_t>(
      std::llround(options.val_fraction * static_cast<double>(result.tokens)));
  const int64_t train = result.tokens - result.val_tokens;
  ZERO_CHECK(result.val_tokens >= 2 && train >= 2, "the text of ", files.size(),
             " file(s) is ", result.tokens, " tokens: too few for a validation fraction of ",
             options.val_fraction, " (each part needs 2 tokens at least)");
  write_file_atomically(out + "_train.bin", token_file_bytes(ids.data(), train, format));
  write_file_atomically(out + "_val.bin",
                        token_file_bytes(ids.data() + train, result.val_tokens, format));
  result.files = {out + "_train.bin", out + "_val.bin"};
  return result;
}

std::string prepare_documents(const std::string& input, const DocumentEncoder& encoder,
                              double val_fraction, int threads, std::string* note,
                              const std::function<void(int64_t, int64_t)>& progress) {
  const std::string prefix = text_data_prefix(input);
  const std::string dir = fs::path(prefix).parent_path().string();
  std::vector<Fingerprint> inputs;
  for (const std::string& file : list_text_files({input})) inputs.push_back(fingerprint(file));
  const nlohmann::json wanted = manifest_of(inputs, val_fraction, encoder.identity);
  const std::string manifest_path = dir + "/manifest.json";
  std::error_code error;
  if (fs::exists(manifest_path, error) && fs::exists(prefix + "_train.bin", error) &&
      fs::exists(prefix + "_val.bin", error)) {
    nlohmann::json found;
    try {
      found = nlohmann::json::parse(
          read_regular_file(manifest_path, "token cache manifest", kMaxConfigBytes));
    } catch (const std::exception&) {
      found = nullptr;  // damaged: tokenized again
    }
    if (found == wanted) {
      if (note) *note = "using the tokens of " + input + " cached in " + dir;
      return prefix;
    }
  }
  fs::create_directories(dir, error);
  ZERO_CHECK(!error, "cannot create the token cache directory '", dir, "': ", error.message());
  // The manifest goes last: an interrupted run leaves no manifest that vouches for old files.
  fs::remove(manifest_path, error);
  TokenizeOptions options;
  options.val_fraction = val_fraction;
  options.threads = threads;
  options.progress = progress;
  std::vector<std::string> files;
  for (const Fingerprint& f : inputs) files.push_back(f.path);
  const TokenizeResult result = tokenize_documents(files, encoder, prefix, options);
  write_file_atomically(manifest_path, wanted.dump(1) + "\n");
  if (note) {
    char line[256];
    std::snprintf(line, sizeof(line),
                  "tokenized %lld file(s) of %s (%.1f MB) into %lld tokens in %.2f s (%.1f MB/s); "
                  "the last %lld tokens (%.0f %%) are the validation set; cached in %s",
                  static_cast<long long>(result.documents), input.c_str(), result.bytes / 1e6,
                  static_cast<long long>(result.tokens), result.seconds,
                  result.bytes / 1e6 / std::max(result.seconds, 1e-9),
                  static_cast<long long>(result.val_tokens), 100 * val_fraction, dir.c_str());
    *note = line;
  }
  return prefix;
}

}  // namespace

bool is_text_data(const std::string& path) {
  std::error_code error;
  if (fs::is_directory(path, error)) return true;
  const std::string ext = fs::path(path).extension().string();
  return ext == ".txt";
}

std::vector<std::string> list_text_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code error;
    const fs::file_status status = fs::status(input, error);
    ZERO_CHECK(!error && fs::exists(status), "text input '", input, "' does not exist");
    if (!fs::is_directory(status)) {
      files.push_back(input);
      continue;
    }
    std::vector<std::string> found;
    for (auto it = fs::recursive_directory_iterator(input, error);
         !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
      if (it->path().extension() == ".txt" && it->is_regular_file()) {
        found.push_back(it->path().string());
      }
    }
    ZERO_CHECK(!error, "text input '", input, "': cannot list the directory: ", error.message());
    ZERO_CHECK(!found.empty(), "text input '", input, "' is a directory without any .txt file");
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  ZERO_CHECK(!files.empty(), "no text input given");
  return files;
}

TokenizeResult tokenize_text_files(const std::vector<std::string>& files,
                                   const GPT2Encoder& encoder, const std::string& out,
                                   const TokenizeOptions& options) {
  return tokenize_documents(files, document_encoder(encoder), out, options);
}

TokenizeResult tokenize_text_files(const std::vector<std::string>& files,
                                   const HfTokenizer& tokenizer, const std::string& out,
                                   const TokenizeOptions& options) {
  return tokenize_documents(files, document_encoder(tokenizer), out, options);
}

std::string text_data_prefix(const std::string& input) {
  std::string base = fs::path(input).lexically_normal().string();
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return base + ".zero-tokens/data";
}

std::string prepare_text_data(const std::string& input, const GPT2Encoder& encoder,
                              double val_fraction, int threads, std::string* note,
                              const std::function<void(int64_t, int64_t)>& progress) {
  return prepare_documents(input, document_encoder(encoder), val_fraction, threads, note,
                           progress);
}

std::string prepare_text_data(const std::string& input, const HfTokenizer& tokenizer,
                              double val_fraction, int threads, std::string* note,
                              const std::function<void(int64_t, int64_t)>& progress) {
  return prepare_documents(input, document_encoder(tokenizer), val_fraction, threads, note,
                           progress);
}

}  // namespace zero
