// TokenTable (src/data/token_table.h), the GPT-2 encoder's bytes -> id lookup: against
// std::unordered_map on random keys built to collide (shared 8-byte heads, every length from
// 1 to 40, embedded zero bytes), growing from empty and preallocated, and on GPT-2's vocabulary.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/token_table.h"
#include "zero/tokenizer.h"

namespace zero::test {
namespace {

// Keys whose heads often agree: a few prefixes of 8 bytes and short alphabets with zeros.
std::string random_key(std::mt19937& rng) {
  static const std::vector<std::string> prefixes = {"", " interna", std::string(8, '\0'), "aaaaaaaa"};
  std::uniform_int_distribution<int> length(1, 40), prefix(0, 3), byte(0, 3);
  std::string key = prefixes[static_cast<size_t>(prefix(rng))];
  const int extra = length(rng);
  for (int i = 0; i < extra; ++i) key.push_back(static_cast<char>("\0ab\xff"[byte(rng)]));
  return key.substr(0, static_cast<size_t>(std::max(1, extra)));
}

void check_against_reference(size_t capacity, uint32_t seed) {
  std::mt19937 rng(seed);
  TokenTable table(capacity);
  std::unordered_map<std::string, uint32_t> reference;
  for (uint32_t id = 0; id < 20000; ++id) {
    const std::string key = random_key(rng);
    const bool fresh = reference.emplace(key, id).second;
    ASSERT_EQ(table.insert(key, id), fresh) << "key of " << key.size() << " bytes";
  }
  EXPECT_EQ(table.size(), reference.size());
  for (const auto& [key, id] : reference) ASSERT_EQ(table.find(key), id);
  for (int i = 0; i < 20000; ++i) {
    const std::string probe = random_key(rng);
    const auto it = reference.find(probe);
    ASSERT_EQ(table.find(probe), it == reference.end() ? TokenTable::kAbsent : it->second);
  }
  // A key's every proper prefix and extension is a different key.
  for (const auto& [key, id] : reference) {
    const std::string longer = key + 'a';
    const auto it = reference.find(longer);
    ASSERT_EQ(table.find(longer), it == reference.end() ? TokenTable::kAbsent : it->second);
  }
}

TEST(TokenTable, MatchesUnorderedMapGrowingFromEmpty) { check_against_reference(0, 1); }

TEST(TokenTable, MatchesUnorderedMapPreallocated) { check_against_reference(20000, 2); }

TEST(TokenTable, GPT2Vocabulary) {
  const GPT2Decoder decoder = GPT2Decoder::load(std::string(ZERO_DATA_DIR) + "/gpt2/encoder.json");
  TokenTable table(static_cast<size_t>(decoder.vocab_size()));
  for (int64_t id = 0; id < decoder.vocab_size(); ++id) {
    ASSERT_TRUE(table.insert(decoder.token_bytes(id), static_cast<uint32_t>(id)));
  }
  for (int64_t id = 0; id < decoder.vocab_size(); ++id) {
    ASSERT_EQ(table.find(decoder.token_bytes(id)), static_cast<uint32_t>(id));
    ASSERT_FALSE(table.insert(decoder.token_bytes(id), 0));
  }
  EXPECT_EQ(table.find(" zzzzqqq"), TokenTable::kAbsent);
  EXPECT_EQ(table.find(std::string(1, '\0') + "x"), TokenTable::kAbsent);
}

}  // namespace
}  // namespace zero::test
