// Every code point through NFC and the regex pre-tokenizers (PCRE2 here, Oniguruma in
// tokenizers), against fixtures/tokenizer/unicode_probe.json.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "fixture_check.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/unicode.h"

namespace vllm {
namespace {

std::string probe_text(char32_t cp) {
  std::string c;
  tok::utf8_append(c, cp);
  return "a" + c + "1" + c + c + " " + c + "\u0301\n" + c + "'" + c + "\u0327";
}

const nlohmann::json& probe_fixture() {
  static const nlohmann::json j = [] {
    std::ifstream in("fixtures/tokenizer/unicode_probe.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

bool is_surrogate(char32_t cp) { return cp >= 0xD800 && cp <= 0xDFFF; }

TEST(UnicodeProbe, NfcOfEveryCodePoint) {
  std::map<char32_t, std::string> changed;
  for (const auto& e : probe_fixture().at("nfc"))
    changed[e.at(0).get<char32_t>()] = e.at(1).get<std::string>();
  size_t mismatches = 0;
  std::vector<std::string> examples;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (is_surrogate(cp)) continue;
    const std::string probe = probe_text(cp);
    const auto it = changed.find(cp);
    const std::string& want = it == changed.end() ? probe : it->second;
    if (tok::nfc(probe) != want && ++mismatches <= 5) examples.push_back(std::to_string(cp));
  }
  EXPECT_EQ(mismatches, 0u) << "first code points: " << ::testing::PrintToString(examples);
}

// Piece lengths (bytes of the original text) of normalize + pre_tokenize; byte-level pieces hold
// one character per original byte.
std::vector<int> signature(const tok::Pipeline& p, char32_t cp) {
  std::string text = probe_text(cp);
  if (p.normalizer) p.normalizer->normalize(text);
  std::vector<tok::Piece> pieces{{text, true}};
  p.pre_tokenizer->pre_tokenize(pieces);
  std::vector<int> sig;
  for (const auto& piece : pieces) {
    int n = 0;
    for (unsigned char ch : piece.text) n += (ch & 0xC0) != 0x80;
    sig.push_back(n);
  }
  return sig;
}

class PreTokenizerProbe : public ::testing::TestWithParam<std::string> {};

// Checks both ends of every range of equal behaviour and every 7th code point in between.
TEST_P(PreTokenizerProbe, EveryRangeOfCodePoints) {
  const Tokenizer* t = testing::test_tokenizer(GetParam());
  if (!t) GTEST_SKIP() << GetParam() << " is absent";
  const auto& fx = probe_fixture().at("pre_tokenizers").at(GetParam());
  const auto sigs = fx.at("signatures").get<std::vector<std::vector<int>>>();
  const auto ranges = fx.at("ranges").get<std::vector<std::pair<char32_t, size_t>>>();
  size_t checked = 0, mismatches = 0;
  std::vector<std::string> examples;
  for (size_t r = 0; r < ranges.size(); ++r) {
    const char32_t first = ranges[r].first;
    const char32_t last = r + 1 < ranges.size() ? ranges[r + 1].first - 1 : 0x10FFFF;
    for (char32_t cp = first; cp <= last; ++cp) {
      if (is_surrogate(cp) || (cp != first && cp != last && cp % 7 != 0)) continue;
      ++checked;
      const auto got = signature(t->pipeline(), cp);
      if (got != sigs[ranges[r].second] && ++mismatches <= 5)
        examples.push_back("U+" +
                           [&] {
                             char b[16];
                             std::snprintf(b, sizeof b, "%04X", unsigned(cp));
                             return std::string(b);
                           }() +
                           " want " + ::testing::PrintToString(sigs[ranges[r].second]) + " got " +
                           ::testing::PrintToString(got));
    }
  }
  std::cout << GetParam() << ": " << ranges.size() << " ranges, " << checked
            << " code points checked, " << mismatches << " mismatches\n";
  EXPECT_EQ(mismatches, 0u) << ::testing::PrintToString(examples);
}

INSTANTIATE_TEST_SUITE_P(Regex, PreTokenizerProbe,
                         ::testing::Values("llama3", "qwen3", "deepseek_v3", "smollm2_gguf"));

}  // namespace
}  // namespace vllm
