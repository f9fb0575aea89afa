// Tokenizer accessors, streaming detokenization edge cases and load errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "fixture_check.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/check.h"

namespace vllm {
namespace {

#define REQUIRE_TOKENIZER(var, name)                    \
  const Tokenizer* var = testing::test_tokenizer(name); \
  if (!var) GTEST_SKIP() << name << " tokenizer files are absent"

struct Expected {
  const char* name;
  int32_t vocab_size;
  std::optional<int32_t> bos, eos;
  const char* bos_token;
  const char* eos_token;
  bool has_template;
};

class Accessors : public ::testing::TestWithParam<Expected> {};

TEST_P(Accessors, MatchTheFiles) {
  const Expected& e = GetParam();
  REQUIRE_TOKENIZER(t, e.name);
  EXPECT_EQ(t->vocab_size(), e.vocab_size);
  EXPECT_EQ(t->bos_id(), e.bos);
  EXPECT_EQ(t->eos_id(), e.eos);
  EXPECT_EQ(t->bos_token(), e.bos_token);
  EXPECT_EQ(t->eos_token(), e.eos_token);
  EXPECT_EQ(t->chat_template().has_value(), e.has_template);
  if (e.eos) {
    EXPECT_TRUE(t->is_special(*e.eos));
    EXPECT_EQ(t->token_to_id(t->id_to_token(*e.eos)), e.eos);
  }
  for (int32_t id : {0, 1, 100, 1000, e.vocab_size - 1})
    EXPECT_EQ(t->token_to_id(t->id_to_token(id)), id) << id;
  EXPECT_EQ(t->id_to_token(e.vocab_size), "");
  EXPECT_EQ(t->id_to_token(-1), "");
  EXPECT_FALSE(t->token_to_id("no such token \x01\x02"));
}

INSTANTIATE_TEST_SUITE_P(
    Shared, Accessors,
    ::testing::Values(Expected{"llama2", 32000, 1, 2, "<s>", "</s>", false},
                      Expected{"llama3", 128256, 128000, 128001, "<|begin_of_text|>",
                               "<|end_of_text|>", true},
                      Expected{"qwen3", 151669, std::nullopt, 151645, "", "<|im_end|>", true},
                      Expected{"gemma3", 262145, 2, 106, "<bos>", "<end_of_turn>", true},
                      Expected{"deepseek_v3", 128815, 0, 1,
                               "<\xEF\xBD\x9C"
                               "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                               "<\xEF\xBD\x9C"
                               "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                               true}),
    [](const auto& info) { return std::string(info.param.name); });

std::vector<std::string> stream(const Tokenizer& t, const std::vector<int32_t>& ids,
                                bool skip = false, std::span<const int32_t> context = {}) {
  IncrementalDetokenizer d(t, skip, context);
  std::vector<std::string> deltas;
  for (int32_t id : ids) deltas.push_back(d.push(id));
  deltas.push_back(d.finish());
  return deltas;
}

std::string join(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) s += p;
  return s;
}

TEST(IncrementalDetokenizer, HoldsByteFallbackRunsUntilTheyEnd) {
  REQUIRE_TOKENIZER(t, "llama2");
  // "a😀b": the emoji is four <0xXX> byte tokens in this vocabulary.
  const auto ids = t->encode(
      "a\xF0\x9F\x98\x80"
      "b",
      false);
  const auto deltas = stream(*t, ids);
  EXPECT_EQ(join(deltas), t->decode(ids));
  for (const auto& d : deltas) {
    EXPECT_TRUE(tok::utf8_is_valid(d));
    EXPECT_EQ(d.find(tok::kReplacementChar), std::string::npos) << d;
  }
}

TEST(IncrementalDetokenizer, NeverEmitsPartialCharactersForByteLevel) {
  REQUIRE_TOKENIZER(t, "llama3");
  const std::string text = "日本語 😀👍🏽 مرحبا";
  const auto ids = t->encode(text, false);
  const auto deltas = stream(*t, ids);
  EXPECT_EQ(join(deltas), text);
  for (const auto& d : deltas) EXPECT_EQ(d.find(tok::kReplacementChar), std::string::npos) << d;
}

TEST(IncrementalDetokenizer, FinishFlushesAnIncompleteTail) {
  REQUIRE_TOKENIZER(t, "llama3");
  auto ids = t->encode("ok ", false);
  ids.push_back(*t->token_to_id("\xC3\xA6"));  // byte-level "æ" is the byte 0xE6: a lead byte alone
  const auto deltas = stream(*t, ids);
  EXPECT_EQ(join(deltas), t->decode(ids));
  EXPECT_NE(deltas.back().find(tok::kReplacementChar), std::string::npos);
}

TEST(IncrementalDetokenizer, ContextKeepsTheLeadingSpace) {
  REQUIRE_TOKENIZER(t, "llama2");
  const auto prompt = t->encode("Hello", true);
  const auto generated = t->encode("world again", false);
  EXPECT_EQ(t->decode(generated), "world again");  // decoded alone, the leading space goes
  EXPECT_EQ(join(stream(*t, generated, false, prompt)), " world again");
}

// Found by tests/fuzz/fuzz_detokenizer: a prompt given as ids may end inside a character.
// The character is emitted whole once a generated token completes it, as tokenizers'
// DecodeStream does; before, the delta started at the byte length of the context's U+FFFD,
// a piece of the character (invalid UTF-8 that reached clients as extra U+FFFDs).
TEST(IncrementalDetokenizer, ContextEndingInsideACharacter) {
  for (const char* name : {"llama3", "llama2"}) {
    REQUIRE_TOKENIZER(t, name);
    // U+1F642: four bytes, split over tokens in both vocabularies.
    const auto ids = t->encode("ok \xF0\x9F\x99\x82 yes", false);
    for (size_t cut = 1; cut + 1 < ids.size(); ++cut) {
      const std::vector<int32_t> context(ids.begin(), ids.begin() + cut);
      const std::vector<int32_t> generated(ids.begin() + cut, ids.end());
      const auto deltas = stream(*t, generated, false, context);
      for (const auto& d : deltas) EXPECT_TRUE(tok::utf8_is_valid(d)) << name << " cut " << cut;
      const std::string text = join(deltas);
      // The end of the text is the generated tokens' own, whatever the context.
      EXPECT_TRUE(text.ends_with(" yes")) << name << " cut " << cut << ": " << text;
      EXPECT_EQ(text.find(tok::kReplacementChar), std::string::npos) << name << " cut " << cut;
    }
  }
}

TEST(IncrementalDetokenizer, SkipsSpecialTokens) {
  REQUIRE_TOKENIZER(t, "qwen3");
  const auto ids = t->encode("<|im_start|>assistant\nHi there!<|im_end|>", false);
  EXPECT_EQ(join(stream(*t, ids, true)), "assistant\nHi there!");
  EXPECT_EQ(join(stream(*t, ids, false)), "<|im_start|>assistant\nHi there!<|im_end|>");
}

TEST(Tokenizer, EncodesConcurrently) {
  REQUIRE_TOKENIZER(t, "qwen3");
  const auto& corpus = testing::fixture_corpus();
  std::vector<std::vector<int32_t>> want;
  for (const auto& s : corpus) want.push_back(t->encode(s));
  std::vector<size_t> bad(4, 0);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < bad.size(); ++k)
    threads.emplace_back([&, k] {
      for (size_t i = k; i < corpus.size(); i += 1 + k)
        if (t->encode(corpus[i]) != want[i]) ++bad[k];
    });
  for (auto& th : threads) th.join();
  for (size_t k = 0; k < bad.size(); ++k) EXPECT_EQ(bad[k], 0u) << "thread " << k;
}

TEST(Tokenizer, DecodeSkipsUnknownIds) {
  REQUIRE_TOKENIZER(t, "llama3");
  const std::vector<int32_t> ids = {-5, 9906, 1000000, 1917};
  EXPECT_EQ(t->decode(ids), "Hello world");
}

std::string write_temp(const std::string& name, const std::string& content) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << content;
  return path.string();
}

TEST(TokenizerLoad, ReportsBadInput) {
  EXPECT_THROW(Tokenizer::from_files("/nonexistent/tokenizer.json", ""), Error);
  const auto bad_json = write_temp("vllm_tok_bad.json", "{\"model\": ");
  EXPECT_THROW(Tokenizer::from_files(bad_json, ""), Error);
  const auto unigram =
      write_temp("vllm_tok_unigram.json",
                 R"({"model": {"type": "Unigram", "vocab": []}, "added_tokens": []})");
  EXPECT_THROW(Tokenizer::from_files(unigram, ""), Error);
  const auto bad_normalizer = write_temp(
      "vllm_tok_norm.json",
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "normalizer": {"type": "Precompiled"}})");
  EXPECT_THROW(Tokenizer::from_files(bad_normalizer, ""), Error);
  for (const auto& p : {bad_json, unigram, bad_normalizer}) std::filesystem::remove(p);

  GgufVocab v;
  v.model = "gpt2";
  v.pre = "no-such-pre";
  v.tokens = {"a", "b"};
  EXPECT_THROW(Tokenizer::from_gguf_vocab(v), Error);
  v.model = "bert";
  EXPECT_THROW(Tokenizer::from_gguf_vocab(v), Error);
}

TEST(TokenizerLoad, MinimalByteLevelBpe) {
  // A four-token vocabulary with one merge, no normalizer and no config.
  const auto path = write_temp("vllm_tok_min.json", R"({
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3}, "merges": ["a b"]},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "decoder": {"type": "ByteLevel"},
    "added_tokens": [{"id": 4, "content": "<eos>", "special": true, "single_word": false,
                      "lstrip": false, "rstrip": false, "normalized": false}]})");
  const auto t = Tokenizer::from_files(path, "");
  std::filesystem::remove(path);
  EXPECT_EQ(t->encode("ab ab<eos>"), (std::vector<int32_t>{2, 3, 2, 4}));
  EXPECT_EQ(t->decode(std::vector<int32_t>{2, 3, 2, 4}), "ab ab<eos>");
  EXPECT_EQ(t->decode(std::vector<int32_t>{2, 3, 2, 4}, true), "ab ab");
  EXPECT_EQ(t->vocab_size(), 5);
  EXPECT_FALSE(t->bos_id());
  EXPECT_FALSE(t->chat_template());
}

}  // namespace
}  // namespace vllm
