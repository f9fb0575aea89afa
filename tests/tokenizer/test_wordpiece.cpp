// WordPiece / BERT tokenization: byte-exact with Hugging Face `tokenizers` on the whole tokenizer
// corpus for all-MiniLM-L6-v2's tokenizer.json (fixtures/tokenizer/minilm.jsonl and
// fixtures/embeddings/minilm.json, from tools/make_embedding_fixtures.py), plus the algorithm's
// documented cases on a hand-made vocabulary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "fixture_check.h"
#include "tokenizer/bert_text.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/wordpiece.h"
#include "util/check.h"

namespace vllm {
namespace {

constexpr const char* kMiniLm = "models/all-MiniLM-L6-v2";

const Tokenizer* minilm() {
  static const std::unique_ptr<Tokenizer> tok =
      std::filesystem::exists(std::string(kMiniLm) + "/tokenizer.json")
          ? Tokenizer::from_dir(kMiniLm) : nullptr;
  return tok.get();
}

TEST(WordPiece, MiniLmMatchesTokenizersOnCorpus) {
  const Tokenizer* tok = minilm();
  if (!tok) GTEST_SKIP() << kMiniLm << " is absent (WITH_TEST_MODELS=1 scripts/setup.sh)";
  const auto report = testing::check_fixture(*tok, "minilm", /*with_stream=*/true);
  std::cout << report.summary("minilm") << "\n";
  EXPECT_EQ(report.total(), 0u) << report.summary("minilm");
}

TEST(WordPiece, MiniLmMatchesTokenizersOnEmbeddingTexts) {
  const Tokenizer* tok = minilm();
  if (!tok) GTEST_SKIP() << kMiniLm << " is absent (WITH_TEST_MODELS=1 scripts/setup.sh)";
  std::ifstream in("fixtures/embeddings/minilm.json");
  ASSERT_TRUE(in) << "run from the repo root";
  const auto cases = nlohmann::json::parse(in).at("cases");
  ASSERT_GE(cases.size(), 100u);
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    EXPECT_EQ(tok->encode(text, true), c.at("ids").get<std::vector<int32_t>>()) << text;
  }
}

// The classic example of the WordPiece papers and tokenizers' docs, on a vocabulary made here.
TEST(WordPiece, GreedyLongestMatchFirst) {
  const std::vector<std::pair<std::string, int32_t>> vocab = {
      {"[UNK]", 0}, {"un", 1}, {"##aff", 2}, {"##able", 3}, {"a", 4}, {"##ff", 5}, {"unaff", 6}};
  tok::WordPieceOptions o;
  o.max_input_chars_per_word = 10;
  const tok::WordPieceModel wp(vocab, o);
  std::vector<int32_t> ids;
  wp.tokenize("unaffable", ids);  // "unaff" is the longest prefix; then "##able"
  EXPECT_EQ(ids, (std::vector<int32_t>{6, 3}));
  ids.clear();
  wp.tokenize("unaffablex", ids);  // no piece for "x": the whole word is unknown
  EXPECT_EQ(ids, (std::vector<int32_t>{0}));
  ids.clear();
  wp.tokenize("aaaaaaaaaaa", ids);  // 11 characters > 10
  EXPECT_EQ(ids, (std::vector<int32_t>{0}));
  EXPECT_THROW(tok::WordPieceModel({{"a", 0}}, o), Error);  // no [UNK] in the vocabulary
}

TEST(BertNormalizer, StepsInTokenizersOrder) {
  const auto n = tok::make_bert_normalizer({});
  // "Héllo\tWÖRLD\a 中文"
  std::string s = "H\xC3\xA9llo\tW\xC3\x96RLD\x07 \xE4\xB8\xAD\xE6\x96\x87";
  n->normalize(s);
  EXPECT_EQ(s, "hello world  \xE4\xB8\xAD  \xE6\x96\x87 ");
  tok::BertNormalizerOptions keep_accents;
  keep_accents.strip_accents = false;
  std::string t = "\xC3\x89T\xC3\x89";  // "ÉTÉ": lowercased, accents kept
  tok::make_bert_normalizer(keep_accents)->normalize(t);
  EXPECT_EQ(t, "\xC3\xA9t\xC3\xA9");
}

TEST(BertPreTokenizer, SplitsWhitespaceAndIsolatesPunctuation) {
  std::vector<tok::Piece> pieces = {{"hello, world!! a-b", true}};
  tok::make_bert_pre_tokenizer()->pre_tokenize(pieces);
  std::vector<std::string> words;
  for (const auto& p : pieces) words.push_back(p.text);
  EXPECT_EQ(words, (std::vector<std::string>{"hello", ",", "world", "!", "!", "a", "-", "b"}));
}

}  // namespace
}  // namespace vllm
