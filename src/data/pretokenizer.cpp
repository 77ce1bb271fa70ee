// Pre-tokenization regexes and parallel encoding (src/data/pretokenizer.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "data/pretokenizer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "zero/error.h"

namespace zero {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// The letters (\p{L}) and numbers (\p{N}) of Unicode 16 that PCRE2 10.42's Unicode 14 tables
// lack, as class ranges: what tokenizers 0.23.3's Oniguruma matches and PCRE2 does not, found
// by matching every code point with both (tests/data/make_hf_tokenizers.py records the
// library's classes; test_hf_tokenizer checks them code point by code point).
constexpr const char* kNewerLetters =
    R"(\x{1C89}-\x{1C8A}\x{A7CB}-\x{A7CD}\x{A7DA}-\x{A7DC}\x{105C0}-\x{105F3}\x{10D4A}-\x{10D65})"
    R"(\x{10D6F}-\x{10D85}\x{10EC2}-\x{10EC4}\x{1123F}-\x{11240}\x{11380}-\x{11389}\x{1138B})"
    R"(\x{1138E}\x{11390}-\x{113B5}\x{113B7}\x{113D1}\x{113D3}\x{11BC0}-\x{11BE0}\x{11F02})"
    R"(\x{11F04}-\x{11F10}\x{11F12}-\x{11F33}\x{1342F}\x{13441}-\x{13446}\x{13460}-\x{143FA})"
    R"(\x{16100}-\x{1611D}\x{16D40}-\x{16D6C}\x{18CFF}\x{1B132}\x{1B155}\x{1DF25}-\x{1DF2A})"
    R"(\x{1E030}-\x{1E06D}\x{1E4D0}-\x{1E4EB}\x{1E5D0}-\x{1E5ED}\x{1E5F0}\x{2B739})"
    R"(\x{2EBF0}-\x{2EE5D}\x{31350}-\x{323AF})";
constexpr const char* kNewerNumbers =
    R"(\x{10D40}-\x{10D49}\x{116D0}-\x{116E3}\x{11BF0}-\x{11BF9}\x{11F50}-\x{11F59})"
    R"(\x{16130}-\x{16139}\x{16D70}-\x{16D79}\x{1CCF0}-\x{1CCF9}\x{1D2C0}-\x{1D2D3})"
    R"(\x{1E4F0}-\x{1E4F9}\x{1E5F1}-\x{1E5FA})";
// Unicode's White_Space, Oniguruma's \s (PCRE2's \s adds U+180E through \h).
constexpr const char* kWhiteSpace =
    R"(\x{9}-\x{D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F})"
    R"(\x{3000})";

// The pre-tokenization patterns for which a space between two non-space ASCII characters always
// starts a piece (see starts_piece_at_space_between_ascii), spelled as tokenizer files do.
constexpr const char* kSpaceCutPatterns[] = {
    // GPT-2 (tiktoken's r50k_base, its contractions folded into one group).
    R"('(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
    // GPT-2 (tokenizers' ByteLevel pre-tokenizer).
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
    // Llama 3.
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+)"
    R"([\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    // Qwen2.
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

}  // namespace

PreTokenizationRegex::PreTokenizationRegex(const std::string& pattern, const std::string& what)
    : pattern_(pattern), what_(what) {
  int error = 0;
  PCRE2_SIZE error_at = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP, &error, &error_at, nullptr);
  ZERO_CHECK(code_ != nullptr, what, ": the regex does not compile (PCRE2: ", pcre2_message(error),
             " at offset ", error_at, ")");
  const int jit = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
  if (jit != 0) {
    pcre2_code_free(code_);
    code_ = nullptr;
    // Without JIT pcre2_jit_match is unavailable: say so rather than run 10x slower unnoticed.
    ZERO_CHECK(false, what, ": this PCRE2 cannot JIT-compile the regex (", pcre2_message(jit),
               "); zero needs a PCRE2 built with JIT (Debian's is)");
  }
}

PreTokenizationRegex::PreTokenizationRegex(PreTokenizationRegex&& other) noexcept
    : pattern_(std::move(other.pattern_)),
      what_(std::move(other.what_)),
      code_(std::exchange(other.code_, nullptr)) {}

PreTokenizationRegex& PreTokenizationRegex::operator=(PreTokenizationRegex&& other) noexcept {
  if (this != &other) {
    pcre2_code_free(code_);
    pattern_ = std::move(other.pattern_);
    what_ = std::move(other.what_);
    code_ = std::exchange(other.code_, nullptr);
  }
  return *this;
}

PreTokenizationRegex::~PreTokenizationRegex() { pcre2_code_free(code_); }

PreTokenizationRegex::Scratch::Scratch(const PreTokenizationRegex& regex)
    : data_(pcre2_match_data_create_from_pattern(regex.code_, nullptr)),
      context_(pcre2_match_context_create(nullptr)),
      stack_(pcre2_jit_stack_create(32 << 10, kMaxJitStackBytes, nullptr)) {
  if (data_ == nullptr || context_ == nullptr || stack_ == nullptr) {
    // No destructor runs for a constructor that throws; the free functions take null.
    pcre2_jit_stack_free(stack_);
    pcre2_match_context_free(context_);
    pcre2_match_data_free(data_);
    ZERO_CHECK(false, "out of memory for PCRE2's match data and JIT stack");
  }
  pcre2_jit_stack_assign(context_, nullptr, stack_);
}

PreTokenizationRegex::Scratch::~Scratch() {
  pcre2_jit_stack_free(stack_);
  pcre2_match_context_free(context_);
  pcre2_match_data_free(data_);
}

bool PreTokenizationRegex::find(std::string_view text, size_t offset, Scratch& scratch,
                                size_t* begin, size_t* end) const {
  const int rc = pcre2_jit_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                                 offset, PCRE2_NO_UTF_CHECK, scratch.data_, scratch.context_);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  ZERO_CHECK(rc >= 0, what_, ": PCRE2 gave up matching at byte ", offset, " of a piece of ",
             text.size(), " bytes (", pcre2_message(rc), ")");
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.data_);
  *begin = ovector[0];
  *end = ovector[1];
  return true;
}

bool PreTokenizationRegex::may_match_empty() const {
  uint32_t minimum = 0;
  const int rc = pcre2_pattern_info(code_, PCRE2_INFO_MINLENGTH, &minimum);
  ZERO_INTERNAL_ASSERT(rc == 0, "PCRE2_INFO_MINLENGTH: ", pcre2_message(rc));
  return minimum == 0;
}

std::string with_oniguruma_classes(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 1024);
  bool in_class = false;
  // The class's members, bracketed when the escape stands alone.
  const auto add_class = [&](const std::string& members, bool negated) {
    if (in_class) {
      out += members;
    } else {
      out += negated ? "[^" : "[";
      out += members;
      out += "]";
    }
  };
  size_t i = 0;
  const size_t n = pattern.size();
  while (i < n) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < n) {
      const char e = pattern[i + 1];
      if (e == 'Q') {  // \Q...\E: literal text, copied whole
        const size_t close = pattern.find("\\E", i + 2);
        const size_t stop = close == std::string::npos ? n : close + 2;
        out.append(pattern, i, stop - i);
        i = stop;
        continue;
      }
      if (e == 'p' && i + 2 < n) {
        // \pL or \p{L}: the property's name.
        std::string name;
        size_t after = i + 3;
        if (pattern[i + 2] == '{') {
          const size_t close = pattern.find('}', i + 3);
          if (close != std::string::npos) {
            name = pattern.substr(i + 3, close - i - 3);
            after = close + 1;
          }
        } else {
          name = pattern.substr(i + 2, 1);
        }
        if (name == "L" || name == "N") {
          add_class(std::string(R"(\p{)") + name + "}" + (name == "L" ? kNewerLetters
                                                                      : kNewerNumbers),
                    false);
          i = after;
          continue;
        }
      }
      if (e == 's' || (e == 'S' && !in_class)) {
        add_class(kWhiteSpace, e == 'S');
        i += 2;
        continue;
      }
      // \cX takes the next character whatever it is (it may be '[' or ']').
      const size_t length = e == 'c' && i + 2 < n ? 3 : 2;
      out.append(pattern, i, length);
      i += length;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < n && pattern[i] == '^') out += pattern[i++];
      if (i < n && pattern[i] == ']') out += pattern[i++];  // a literal ']' first
      continue;
    }
    if (in_class && c == '[' && i + 1 < n && pattern[i + 1] == ':') {
      // A POSIX class [:name:] inside the class, copied whole.
      const size_t close = pattern.find(":]", i + 2);
      if (close != std::string::npos) {
        out.append(pattern, i, close + 2 - i);
        i = close + 2;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
    ++i;
  }
  return out;
}

bool starts_piece_at_space_between_ascii(const std::string& pattern) {
  return std::find(std::begin(kSpaceCutPatterns), std::end(kSpaceCutPatterns), pattern) !=
         std::end(kSpaceCutPatterns);
}

std::vector<int32_t> encode_in_parallel(
    std::string_view text, int threads, const std::function<size_t(size_t at)>& next_cut,
    const std::function<void(size_t begin, size_t end, std::vector<int32_t>& out)>& encode_chunk,
    const std::function<void(int64_t)>& progress) {
  // Several chunks per thread, taken in turn, so an uneven chunk does not leave threads idle;
  // chunks of at least 256 KiB so a thread's start (tens of microseconds) costs nothing.
  const size_t workers = static_cast<size_t>(std::max(1, threads));
  const size_t pieces = std::max<size_t>(1, std::min(workers * 8, text.size() >> 18));
  std::vector<size_t> cuts = {0};
  for (size_t k = 1; k < pieces; ++k) {
    const size_t cut = next_cut(std::max(cuts.back() + 1, text.size() * k / pieces));
    if (cut >= text.size()) break;
    cuts.push_back(cut);
  }
  cuts.push_back(text.size());
  const size_t chunks = cuts.size() - 1;
  std::vector<std::vector<int32_t>> results(chunks);
  std::atomic<size_t> next{0};
  std::atomic<int64_t> done{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto work = [&] {
    for (size_t c = next++; c < chunks; c = next++) {
      try {
        results[c].reserve((cuts[c + 1] - cuts[c]) / 4 + 16);
        encode_chunk(cuts[c], cuts[c + 1], results[c]);
        done += static_cast<int64_t>(cuts[c + 1] - cuts[c]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    }
  };
  const size_t busy = std::min(workers, chunks);
  if (!progress || busy == 1) {
    std::vector<std::thread> pool;
    for (size_t t = 1; t < busy; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
  } else {
    // Every worker on its own thread; this one only reports, woken by the last worker to
    // finish (a sleeping reporter must not keep a core from the work, nor the caller waiting).
    std::mutex finished_mutex;
    std::condition_variable all_finished;
    size_t finished = 0;
    std::vector<std::thread> pool;
    for (size_t t = 0; t < busy; ++t) {
      pool.emplace_back([&] {
        work();
        std::lock_guard<std::mutex> lock(finished_mutex);
        if (++finished == busy) all_finished.notify_one();
      });
    }
    std::unique_lock<std::mutex> lock(finished_mutex);
    while (!all_finished.wait_for(lock, std::chrono::milliseconds(100),
                                  [&] { return finished == busy; })) {
      progress(done.load());
    }
    lock.unlock();
    for (std::thread& t : pool) t.join();
  }
  if (failure) std::rethrow_exception(failure);
  if (progress) progress(static_cast<int64_t>(text.size()));
  size_t total = 0;
  for (const auto& r : results) total += r.size();
  std::vector<int32_t> out;
  out.reserve(total);
  for (const auto& r : results) out.insert(out.end(), r.begin(), r.end());
  return out;
}

}  // namespace zero
