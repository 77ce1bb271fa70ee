// Hugging Face byte-level BPE tokenizers (zero::HfTokenizer, src/data/hf_tokenizer*.cpp) against
// the `tokenizers` library, on the directories and ids tests/data/make_hf_tokenizers.py makes
// (run by ctest hf_tokenizer, which passes its manifest in ZERO_TEST_HF_MANIFEST):
//   - GPT-2-, Llama-3-, SmolLM2- and Qwen2-style tokenizers trained by the library, one with a
//     Split regex zero does not know, small handmade ones (merges that do not make every token,
//     ignore_merges, bytes that are no token, unk_token fused or not) and GPT-2's own vocabulary
//     converted: the library's ids for every text (contractions, digits, whitespace, emoji, CJK,
//     combining marks, Unicode 16 letters, added tokens inside text, fuzzed code points, other
//     corpora), its decoding, bos/eos and vocab sizes;
//   - encode_parallel equal to encode at 1-4 threads; the GPT-2 conversion equal to GPT2Encoder on
//     the three corpora;
//   - bad tokenizer files refused by key; what the library's regex engine counts as \s, \p{L} and
//     \p{N}, code point by code point, against the PCRE2 patterns zero builds.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "data/pretokenizer.h"
#include "data/utf8.h"
#include "hf_manifest.h"
#include "test_util.h"
#include "zero/data.h"
#include "zero/error.h"
#include "zero/hf_tokenizer.h"
#include "zero/text_corpus.h"
#include "zero/tokenizer.h"

namespace zero::test {
namespace {

const std::string kData = ZERO_DATA_DIR;

const nlohmann::json& manifest() {
  static const nlohmann::json instance = hf_manifest();
  return instance;
}

#define REQUIRE_MANIFEST()                                                                 \
  if (manifest().is_null()) {                                                              \
    GTEST_SKIP() << "ZERO_TEST_HF_MANIFEST is not set: run by ctest hf_tokenizer, which " \
                    "makes the tokenizers with the tokenizers library";                    \
  }

std::vector<int32_t> ids_of(const nlohmann::json& list) { return list.get<std::vector<int32_t>>(); }

std::vector<int64_t> wide(const std::vector<int32_t>& ids) {
  return std::vector<int64_t>(ids.begin(), ids.end());
}

// "" when equal, else where they first differ (texts of 100k ids would drown gtest's output).
std::string difference(const std::vector<int32_t>& got, const std::vector<int32_t>& expected) {
  if (got == expected) return "";
  size_t i = 0;
  while (i < got.size() && i < expected.size() && got[i] == expected[i]) ++i;
  std::ostringstream out;
  out << "sizes " << got.size() << " and " << expected.size() << ", first difference at " << i
      << ":";
  for (size_t k = i; k < std::min(i + 8, got.size()); ++k) out << " " << got[k];
  out << " instead of";
  for (size_t k = i; k < std::min(i + 8, expected.size()); ++k) out << " " << expected[k];
  return out.str();
}

std::string shortened(const std::string& text) {
  return text.size() <= 80 ? text : text.substr(0, 80) + "... (" + std::to_string(text.size()) +
                                        " bytes)";
}

TEST(HfTokenizer, IdsAndDecodingAreTheLibrarys) {
  REQUIRE_MANIFEST();
  const nlohmann::json& texts = manifest()["texts"];
  for (const auto& entry : manifest()["tokenizers"]) {
    const std::string name = entry["name"];
    SCOPED_TRACE(name);
    const HfTokenizer tokenizer = HfTokenizer::load(entry["dir"].get<std::string>());
    EXPECT_EQ(tokenizer.vocab_size(), entry["vocab_size"].get<int64_t>());
    EXPECT_EQ(tokenizer.bos_id(), entry["bos"].is_null()
                                      ? std::nullopt
                                      : std::optional<int32_t>(entry["bos"].get<int32_t>()));
    EXPECT_EQ(tokenizer.eos_id(), entry["eos"].is_null()
                                      ? std::nullopt
                                      : std::optional<int32_t>(entry["eos"].get<int32_t>()));
    int compared = 0;
    for (const auto& testcase : entry["cases"]) {
      const std::string text = texts[testcase["text"].get<size_t>()];
      SCOPED_TRACE(shortened(text));
      if (testcase.contains("error")) {
        try {
          (void)tokenizer.encode(text, "the sample");
          ADD_FAILURE() << "text NFC would have to change was encoded";
        } catch (const Error& error) {
          const std::string message = error.what();
          EXPECT_NE(message.find("the sample: NFC normalization"), std::string::npos) << message;
          EXPECT_NE(message.find(testcase["error"].get<std::string>()), std::string::npos)
              << message;
        }
        continue;
      }
      const std::vector<int32_t> expected = ids_of(testcase["ids"]);
      const std::vector<int32_t> ids = tokenizer.encode(text);
      EXPECT_EQ(difference(ids, expected), "");
      const std::string decoded =
          testcase.contains("decoded") ? testcase["decoded"].get<std::string>() : text;
      const std::string bytes = tokenizer.decode(wide(expected));
      if (utf8::first_invalid(bytes) < 0) {
        EXPECT_EQ(bytes, decoded);
      } else {  // the library replaced what is not UTF-8
        EXPECT_EQ(utf8::replace_invalid(bytes), decoded);
      }
      ++compared;
    }
    EXPECT_GT(compared, 40);
  }
}

TEST(HfTokenizer, ParallelEncodingIsExact) {
  REQUIRE_MANIFEST();
  // Austen (no code point from U+0300 up, so the NFC tokenizer takes it too) with added tokens
  // among the paragraphs, some with spaces around: encode_parallel cuts at them, and at spaces
  // where the pre-tokenization allows.
  const std::string austen = read_file(manifest()["corpus"]["austen"].get<std::string>());
  std::string text;
  size_t paragraph = 0;
  for (size_t at = 0; at < austen.size();) {
    size_t end = austen.find("\n\n", at);
    end = end == std::string::npos ? austen.size() : end + 2;
    text.append(austen, at, end - at);
    if (++paragraph % 40 == 0) text += paragraph % 80 == 0 ? "<|endoftext|>" : " <|im_start|> ";
    at = end;
  }
  // And the first half with each space replaced by a run of whitespace, different each time
  // (where a space may be inside a piece: "  " or "\n " is one piece for GPT-2's pattern,
  // " \n" one for Llama 3's and Qwen2's).
  std::string spaced;
  const char* const runs[] = {" ", "  ", "   ", " \n", "\n ", "\n \n", "\t ", " \t", " \r\n"};
  uint32_t random = 12345;
  for (size_t at = 0; at < austen.size() / 2; ++at) {
    if (austen[at] != ' ') {
      spaced += austen[at];
      continue;
    }
    random = random * 1664525u + 1013904223u;  // Numerical Recipes' LCG
    spaced += runs[(random >> 16) % std::size(runs)];
  }
  for (const auto& entry : manifest()["tokenizers"]) {
    SCOPED_TRACE(entry["name"].get<std::string>());
    const HfTokenizer tokenizer = HfTokenizer::load(entry["dir"].get<std::string>());
    for (const std::string* sample : {&text, &spaced}) {
      const std::vector<int32_t> serial = tokenizer.encode(*sample);
      for (int threads : {1, 2, 4}) {
        int64_t reported = 0;
        const std::vector<int32_t> parallel = tokenizer.encode_parallel(
            *sample, threads, "text", [&](int64_t done) { reported = done; });
        EXPECT_EQ(difference(parallel, serial), "") << threads << " thread(s)";
        EXPECT_EQ(reported, static_cast<int64_t>(sample->size()));
      }
    }
  }
}

TEST(HfTokenizer, Gpt2ConversionIsGpt2Encoder) {
  REQUIRE_MANIFEST();
  const HfTokenizer converted = HfTokenizer::load(manifest()["gpt2"].get<std::string>());
  const GPT2Encoder encoder =
      GPT2Encoder::load(kData + "/gpt2/encoder.json", kData + "/gpt2/vocab.bpe");
  EXPECT_EQ(converted.vocab_size(), 50257);
  EXPECT_EQ(converted.eos_id(), GPT2Encoder::kEndOfText);
  for (const auto& [name, path] : manifest()["corpus"].items()) {
    SCOPED_TRACE(name);
    const std::string text = read_file(path.get<std::string>());
    const std::vector<int32_t> ids = converted.encode(text);
    EXPECT_EQ(difference(ids, encoder.encode(text)), "");
    EXPECT_EQ(converted.decode(wide(ids)), text);
  }
}

TEST(HfTokenizer, BadFilesAreRefusedByKey) {
  REQUIRE_MANIFEST();
  ASSERT_GE(manifest()["bad"].size(), 25u);
  expect_every_bad_directory_refused(manifest()["bad"], [](const std::string& dir) {
    try {
      (void)HfTokenizer::load(dir);
    } catch (const Error& error) {
      // Every message names the file it is about.
      EXPECT_NE(std::string(error.what()).find(dir), std::string::npos) << error.what();
      throw;
    }
  });
}

TEST(HfTokenizer, PathsAndOtherRefusals) {
  REQUIRE_MANIFEST();
  const std::string dir = manifest()["tokenizers"][0]["dir"];
  EXPECT_TRUE(HfTokenizer::present(dir));
  EXPECT_FALSE(HfTokenizer::present(dir + "/no-such-directory"));
  EXPECT_FALSE(HfTokenizer::present(kData));
  const HfTokenizer by_dir = HfTokenizer::load(dir);
  const HfTokenizer by_file = HfTokenizer::load(dir + "/tokenizer.json");
  EXPECT_EQ(by_file.path(), dir + "/tokenizer.json");
  EXPECT_EQ(by_file.eos_id(), by_dir.eos_id());
  EXPECT_EQ(by_file.encode("Call me Ishmael."), by_dir.encode("Call me Ishmael."));
  const auto refused = [](const std::function<void()>& work, const std::string& expected) {
    try {
      work();
      ADD_FAILURE() << "accepted; expected: " << expected;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  };
  refused([&] { (void)HfTokenizer::load(dir + "/missing.json"); }, "missing.json");
  refused([&] { (void)by_dir.encode("ok \xff", "sample"); },
          "sample is not valid UTF-8 at byte offset 3");
  refused([&] { (void)by_dir.encode_parallel("ab\xed\xa0\x80", 2, "sample"); },
          "sample is not valid UTF-8 at byte offset 2");
  refused([&] { (void)by_dir.decode({by_dir.vocab_size()}); }, "is no token");
  refused([&] { (void)by_dir.decode({-1}); }, "id -1 is no token");
}

// A token file's ids followed by those of the other (train, then validation).
std::vector<int32_t> token_files(const std::string& prefix, int64_t vocab_size) {
  std::vector<int32_t> ids;
  for (const char* part : {"_train.bin", "_val.bin"}) {
    const TokenFile file = TokenFile::load(prefix + part, vocab_size);
    const std::vector<int64_t> part_ids = file.tokens(0, file.size());
    ids.insert(ids.end(), part_ids.begin(), part_ids.end());
  }
  return ids;
}

TEST(HfTokenizer, TextDataIsTokenizedAndCachedPerTokenizer) {
  REQUIRE_MANIFEST();
  // zero-train --data FILE.txt: each document after the tokenizer's eos token (none without
  // one); the cache is reused for the same tokenizer only.
  const std::filesystem::path dir =
      std::filesystem::path(manifest()["gpt2"].get<std::string>()).parent_path() / "text-data";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string text;
  for (int i = 0; i < 100; ++i) {
    text += "The whale surfaced again, " + std::to_string(i) + " times.\n";
  }
  std::ofstream((dir / "story.txt").string(), std::ios::binary) << text;
  const std::string story = (dir / "story.txt").string();
  std::string dir_of[2];
  for (const auto& entry : manifest()["tokenizers"]) {
    if (entry["name"] == "llama3-style") dir_of[0] = entry["dir"];
    if (entry["name"] == "handmade") dir_of[1] = entry["dir"];
  }
  const HfTokenizer with_eos = HfTokenizer::load(dir_of[0]);
  const HfTokenizer without_eos = HfTokenizer::load(dir_of[1]);
  ASSERT_TRUE(with_eos.eos_id().has_value());
  ASSERT_FALSE(without_eos.eos_id().has_value());
  std::string note;
  const std::string prefix = prepare_text_data(story, with_eos, 0.1, 2, &note);
  EXPECT_NE(note.find("tokenized 1 file(s)"), std::string::npos) << note;
  std::vector<int32_t> expected = {*with_eos.eos_id()};
  for (const int32_t id : with_eos.encode(text)) expected.push_back(id);
  EXPECT_EQ(token_files(prefix, with_eos.vocab_size()), expected);
  EXPECT_EQ(prepare_text_data(story, with_eos, 0.1, 2, &note), prefix);
  EXPECT_NE(note.find("using the tokens of"), std::string::npos) << note;
  (void)prepare_text_data(story, without_eos, 0.1, 2, &note);
  EXPECT_NE(note.find("tokenized"), std::string::npos) << note;
  EXPECT_EQ(token_files(prefix, without_eos.vocab_size()), without_eos.encode(text));
  const GPT2Encoder gpt2 =
      GPT2Encoder::load(kData + "/gpt2/encoder.json", kData + "/gpt2/vocab.bpe");
  (void)prepare_text_data(story, gpt2, 0.1, 2, &note);
  EXPECT_NE(note.find("tokenized"), std::string::npos) << note;
  (void)prepare_text_data(story, with_eos, 0.1, 2, &note);
  EXPECT_NE(note.find("tokenized"), std::string::npos) << note;
}

// Whether `regex` matches the code point alone.
bool matches(const PreTokenizationRegex& regex, PreTokenizationRegex::Scratch& scratch,
             uint32_t cp) {
  std::string text;
  if (cp < 0x80) {
    text = {static_cast<char>(cp)};
  } else if (cp < 0x800) {
    text = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
  } else if (cp < 0x10000) {
    text = {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
            static_cast<char>(0x80 | (cp & 0x3F))};
  } else {
    text = {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
            static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
  }
  size_t begin = 0, end = 0;
  return regex.find(text, 0, scratch, &begin, &end) && begin == 0 && end == text.size();
}

TEST(HfTokenizer, CharacterClassesAreTheLibrarys) {
  REQUIRE_MANIFEST();
  for (const auto& [name, ranges] : manifest()["classes"].items()) {
    SCOPED_TRACE(name);
    const std::string escape = name == "s" ? R"(\s)" : R"(\p{)" + name + "}";
    const PreTokenizationRegex positive(with_oniguruma_classes(escape), "test");
    // The same class inside a negated class and negated with \S, as the patterns use them.
    const PreTokenizationRegex inside(with_oniguruma_classes("[^a" + escape + "]"), "test");
    const PreTokenizationRegex negated(with_oniguruma_classes(R"(\S)"), "test");
    PreTokenizationRegex::Scratch positive_scratch(positive), inside_scratch(inside),
        negated_scratch(negated);
    std::vector<bool> member(0x110000, false);
    for (const auto& range : ranges) {
      for (uint32_t cp = range[0]; cp <= range[1].get<uint32_t>(); ++cp) member[cp] = true;
    }
    int wrong = 0;
    for (uint32_t cp = 0; cp < 0x110000; ++cp) {
      if (cp >= 0xD800 && cp < 0xE000) continue;
      if (matches(positive, positive_scratch, cp) != member[cp] ||
          (cp != 'a' && matches(inside, inside_scratch, cp) == member[cp]) ||
          (name == "s" && matches(negated, negated_scratch, cp) == member[cp])) {
        if (++wrong <= 10) ADD_FAILURE() << "U+" << std::hex << cp << " classified otherwise";
      }
    }
    EXPECT_EQ(wrong, 0);
  }
}

TEST(HfTokenizer, OnigurumaClassesRewriteOnlyWhatTheyShould) {
  // Escapes inside \Q...\E, other escapes and POSIX classes are left alone; \p{L} and \s inside
  // a class lose their brackets.
  EXPECT_EQ(with_oniguruma_classes(R"(\Q\p{L}\E\d\w[[:alpha:]]\\s)"),
            R"(\Q\p{L}\E\d\w[[:alpha:]]\\s)");
  const std::string rewritten = with_oniguruma_classes(R"([^\s\p{L}])");
  EXPECT_EQ(rewritten.rfind("[^", 0), 0u) << rewritten;
  EXPECT_EQ(std::count(rewritten.begin(), rewritten.end(), '['), 1) << rewritten;
  EXPECT_EQ(with_oniguruma_classes(R"(\p{Lu}\P{L}\S)").substr(0, 11), R"(\p{Lu}\P{L})");
}

}  // namespace
}  // namespace zero::test
