// GPT-2's BPE encoder (zero::GPT2Encoder, src/data/bpe_encoder.cpp) and text -> token files
// (zero/text_corpus.h), single process:
//   - the 64 golden cases of data/gpt2/TestPlans.txt (gpt-tokenizer's r50k cases: emoji, CJK,
//     whitespace runs, contractions), id for id;
//   - Moby-Dick (data/corpus) into exactly the shipped token files (tiktoken's), serially and
//     over 1-4 threads; decode(encode(x)) == x;
//   - UTF-8: the byte offset of the first ill-formed sequence, and the lossy encoding equal to
//     encoding the text with maximal subparts replaced by U+FFFD, as Python's "replace" does;
//   - vocabulary files that disagree are refused, naming the line;
//   - token files: one or a train/validation pair; bad text files refused by name and offset
//     before anything is written; the cache of zero-train --data.
// tests/data/check_encoder_vs_tiktoken.py compares with tiktoken itself on the three corpora and
// on fuzzed UTF-8.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "zero/data.h"
#include "zero/error.h"
#include "zero/text_corpus.h"
#include "zero/tokenizer.h"

namespace zero::test {
namespace {

namespace fs = std::filesystem;

const std::string kData = ZERO_DATA_DIR;

const GPT2Encoder& encoder() {
  static const GPT2Encoder instance =
      GPT2Encoder::load(kData + "/gpt2/encoder.json", kData + "/gpt2/vocab.bpe");
  return instance;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// data/corpus/NAME.txt.xz decompressed (once) into a temporary directory.
std::string corpus(const std::string& name) {
  const std::string path = shared_temp_dir("encoder-corpus") + "/" + name + ".txt";
  if (!fs::exists(path)) {
    const std::string command =
        "xz -dc '" + kData + "/corpus/" + name + ".txt.xz' > '" + path + "'";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }
  return read_file(path);
}

std::vector<int32_t> token_ids(const std::string& path) {
  const TokenFile file = TokenFile::load(path, 50257);
  EXPECT_EQ(file.bytes_per_token(), 2) << path << ": GPT-2's ids are written as uint16";
  const std::vector<int64_t> ids = file.tokens(0, file.size());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

TEST(GPT2Encoder, GoldenCasesOfTestPlans) {
  // Blocks of "EncodingName: NAME", "Sample: TEXT" (which may span lines, up to "Encoded:")
  // and "Encoded: [ids]"; GPT-2's are r50k_base's (the file has other encodings' too).
  const std::string plans = read_file(kData + "/gpt2/TestPlans.txt");
  const std::string marker = "EncodingName: r50k_base\nSample: ";
  size_t at = 0;
  int cases = 0;
  while ((at = plans.find(marker, at)) != std::string::npos) {
    const size_t text_begin = at + marker.size();
    const size_t encoded = plans.find("\nEncoded: [", text_begin);
    ASSERT_NE(encoded, std::string::npos);
    const std::string text = plans.substr(text_begin, encoded - text_begin);
    const size_t list_begin = encoded + 11;
    const size_t list_end = plans.find(']', list_begin);
    std::vector<int32_t> expected;
    std::istringstream list(plans.substr(list_begin, list_end - list_begin));
    for (std::string id; std::getline(list, id, ',');) {
      if (id.find_first_not_of(' ') != std::string::npos) expected.push_back(std::stoi(id));
    }
    EXPECT_EQ(encoder().encode(text), expected) << "case " << cases << ": " << text;
    EXPECT_EQ(encoder().decoder().decode(std::vector<int64_t>(expected.begin(), expected.end())),
              text);
    at = list_end;
    ++cases;
  }
  EXPECT_EQ(cases, 64);
}

TEST(GPT2Encoder, MobyDickGivesTheShippedTokensOnAnyThreadCount) {
  const std::string text = corpus("moby-dick");
  std::vector<int32_t> expected = token_ids(kData + "/tokens/moby_dick_train.bin");
  const std::vector<int32_t> val = token_ids(kData + "/tokens/moby_dick_val.bin");
  expected.insert(expected.end(), val.begin(), val.end());
  ASSERT_EQ(expected.front(), GPT2Encoder::kEndOfText);
  expected.erase(expected.begin());  // the shipped files start with <|endoftext|>
  const std::vector<int32_t> serial = encoder().encode(text);
  EXPECT_EQ(serial, expected);
  for (int threads : {1, 2, 3, 4}) {
    EXPECT_EQ(encoder().encode_parallel(text, threads), expected) << threads << " threads";
  }
  // Cut into many small chunks (the cut rule, not the thread count, is what matters).
  const std::string repeated = text + text + text;
  const std::vector<int32_t> whole = encoder().encode(repeated);
  EXPECT_EQ(encoder().encode_parallel(repeated, 4), whole);
  EXPECT_EQ(encoder().decoder().decode(std::vector<int64_t>(serial.begin(), serial.end())), text);
}

TEST(GPT2Encoder, IllFormedUtf8) {
  // The offset of the first ill-formed sequence, named.
  for (const auto& [bytes, offset] : std::vector<std::pair<std::string, int>>{
           {"ok \xff", 3}, {"\xc0\x80", 0}, {"ab\xed\xa0\x80", 2}, {"abc\xf0\x9f\x98", 3},
           {"x\xf4\x90\x80\x80", 1}, {"\x80", 0}}) {
    try {
      (void)encoder().encode(bytes, "sample");
      ADD_FAILURE() << "ill-formed UTF-8 accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("sample is not valid UTF-8 at byte offset " +
                                               std::to_string(offset)),
                std::string::npos)
          << error.what();
    }
  }
  // Lossy: each maximal subpart becomes U+FFFD (Python's "replace"): "\xf0\x9f\x98" is one,
  // "\xc0\x80" two, a surrogate's three bytes three.
  const std::string fffd = "\xef\xbf\xbd";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a\xf0\x9f\x98" "b", "a" + fffd + "b"},
      {"\xc0\x80", fffd + fffd},
      {"\xed\xa0\x80!", fffd + fffd + fffd + "!"},
      {"caf\xc3\xa9 \xe2\x82", "caf\xc3\xa9 " + fffd},
  };
  for (const auto& [bytes, replaced] : cases) {
    EXPECT_EQ(encoder().encode_lossy(bytes), encoder().encode(replaced)) << replaced;
  }
}

TEST(GPT2Encoder, VocabularyFilesThatDisagreeAreRefused) {
  const std::string dir = shared_temp_dir("encoder-vocab");
  const std::string vocab = read_file(kData + "/gpt2/vocab.bpe");
  // Two merges swapped: merge 0 no longer makes token 256.
  const size_t first = vocab.find('\n') + 1;
  const size_t second = vocab.find('\n', first) + 1;
  const size_t third = vocab.find('\n', second) + 1;
  write_file(dir + "/swapped.bpe", vocab.substr(0, first) + vocab.substr(second, third - second) +
                                       vocab.substr(first, second - first) + vocab.substr(third));
  write_file(dir + "/bad-line.bpe", vocab.substr(0, first) + "onlyone\n" + vocab.substr(second));
  for (const auto& [file, text] : std::vector<std::pair<std::string, std::string>>{
           {"swapped.bpe", "line 2: merge 0 should make token 256"},
           {"bad-line.bpe", "line 2: expected two symbols separated by one space"}}) {
    try {
      (void)GPT2Encoder::load(kData + "/gpt2/encoder.json", dir + "/" + file);
      ADD_FAILURE() << file << " accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(text), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find(file), std::string::npos) << error.what();
    }
  }
}

TEST(TextCorpus, TokenFilesOneOrSplit) {
  const std::string dir = shared_temp_dir("encoder-corpus-files");
  fs::create_directories(dir + "/docs/sub");
  write_file(dir + "/docs/b.txt", "Hello world.");
  write_file(dir + "/docs/sub/a.txt", "It's a test, isn't it?");
  write_file(dir + "/docs/skip.md", "not text by name");
  const std::vector<std::string> files = list_text_files({dir + "/docs"});
  ASSERT_EQ(files.size(), 2u);  // in path order: docs/b.txt, docs/sub/a.txt
  EXPECT_EQ(fs::path(files[0]).filename(), "b.txt");
  const TokenizeResult one = tokenize_text_files(files, encoder(), dir + "/all.bin");
  std::vector<int32_t> expected;  // each document: <|endoftext|>, then its ids
  for (const std::string& text : {std::string("Hello world."), std::string("It's a test, isn't it?")}) {
    const std::vector<int32_t> ids = encoder().encode(text);
    expected.push_back(GPT2Encoder::kEndOfText);
    expected.insert(expected.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(token_ids(dir + "/all.bin"), expected);
  EXPECT_EQ(one.tokens, static_cast<int64_t>(expected.size()));
  EXPECT_EQ(one.documents, 2);
  TokenizeOptions split;
  split.val_fraction = 0.25;
  const TokenizeResult two = tokenize_text_files(files, encoder(), dir + "/split", split);
  std::vector<int32_t> joined = token_ids(dir + "/split_train.bin");
  const std::vector<int32_t> val = token_ids(dir + "/split_val.bin");
  EXPECT_EQ(static_cast<int64_t>(val.size()), two.val_tokens);
  EXPECT_EQ(two.val_tokens, static_cast<int64_t>(std::llround(0.25 * expected.size())));
  joined.insert(joined.end(), val.begin(), val.end());
  EXPECT_EQ(joined, expected);
}

TEST(TextCorpus, BadTextFilesAreRefusedByNameBeforeAnythingIsWritten) {
  const std::string dir = shared_temp_dir("encoder-bad-files");
  write_file(dir + "/good.txt", "fine text");
  write_file(dir + "/empty.txt", "");
  write_file(dir + "/binary.txt", std::string("abc\0def", 7));
  write_file(dir + "/latin1.txt", "caf\xe9 au lait");
  for (const auto& [file, text] : std::vector<std::pair<std::string, std::string>>{
           {"empty.txt", "is empty"},
           {"binary.txt", "is a binary file, not text (a NUL byte at byte offset 3)"},
           {"latin1.txt", "is not valid UTF-8 at byte offset 3"},
           {"missing.txt", "does not exist"}}) {
    const std::string out = dir + "/out-" + file + ".bin";
    try {
      (void)tokenize_text_files(list_text_files({dir + "/good.txt", dir + "/" + file}), encoder(),
                                out);
      ADD_FAILURE() << file << " accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(file), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find(text), std::string::npos) << error.what();
    }
    EXPECT_FALSE(fs::exists(out)) << out;
  }
}

TEST(TextCorpus, PreparedTextIsCachedUntilItChanges) {
  const std::string dir = shared_temp_dir("encoder-cache");
  fs::remove_all(dir + "/story.txt.zero-tokens");
  std::string text;
  for (int i = 0; i < 200; ++i) text += "The whale surfaced again, " + std::to_string(i) + " times.\n";
  write_file(dir + "/story.txt", text);
  std::string note;
  const std::string prefix = prepare_text_data(dir + "/story.txt", encoder(), 0.1, 2, &note);
  EXPECT_EQ(prefix, dir + "/story.txt.zero-tokens/data");
  EXPECT_NE(note.find("tokenized 1 file(s)"), std::string::npos) << note;
  const std::vector<int32_t> train = token_ids(prefix + "_train.bin");
  // Unchanged: cached.
  EXPECT_EQ(prepare_text_data(dir + "/story.txt", encoder(), 0.1, 2, &note), prefix);
  EXPECT_NE(note.find("using the tokens of"), std::string::npos) << note;
  // Another split, or changed text of the same size and a restored time: tokenized again.
  prepare_text_data(dir + "/story.txt", encoder(), 0.2, 2, &note);
  EXPECT_NE(note.find("tokenized"), std::string::npos) << note;
  const auto when = fs::last_write_time(dir + "/story.txt");
  std::string changed = text;
  changed[4] = 'W';  // "The Whale"
  write_file(dir + "/story.txt", changed);
  fs::last_write_time(dir + "/story.txt", when);
  prepare_text_data(dir + "/story.txt", encoder(), 0.2, 2, &note);
  EXPECT_NE(note.find("tokenized"), std::string::npos) << note;
  EXPECT_NE(token_ids(prefix + "_train.bin"), train);
}

}  // namespace
}  // namespace zero::test
