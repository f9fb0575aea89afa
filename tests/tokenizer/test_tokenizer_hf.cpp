// Byte-exact agreement with Hugging Face `tokenizers` on the fixture corpus, for the real
// tokenizer files in ../shared/tokenizers and the SmolLM2 GGUF vocabulary in models/.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "fixture_check.h"
#include "tokenizer/tokenizer.h"

namespace vllm {
namespace {

using testing::kSharedTokenizers;

class HfTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(HfTokenizer, MatchesFixtures) {
  const Tokenizer* tok = testing::test_tokenizer(GetParam());
  if (!tok) GTEST_SKIP() << testing::kSharedTokenizers << GetParam() << " is absent";
  const auto report = testing::check_fixture(*tok, GetParam(), /*with_stream=*/true);
  std::cout << report.summary(GetParam()) << "\n";
  EXPECT_EQ(report.total(), 0u) << report.summary(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Shared, HfTokenizer,
                         ::testing::Values("llama2", "llama3", "qwen3", "gemma3", "deepseek_v3"));

// The variant fixtures patch a shared tokenizer.json (components replaced, added tokens appended);
// the patch is in the fixture's first line.
std::string write_variant(const std::string& name, std::string& base) {
  std::ifstream fx("fixtures/tokenizer/" + name + ".jsonl");
  std::string line;
  std::getline(fx, line);
  const auto variant = nlohmann::json::parse(line).at("variant");
  base = variant.at("base").get<std::string>();
  const std::string path = kSharedTokenizers + base + "/tokenizer.json";
  if (!std::filesystem::exists(path)) return "";
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  for (const auto& [key, value] : variant.at("patch").items()) j[key] = value;
  int32_t next_id = 0;
  for (const auto& [token, id] : j.at("model").at("vocab").items())
    next_id = std::max(next_id, id.get<int32_t>() + 1);
  for (const auto& a : j.at("added_tokens"))
    next_id = std::max(next_id, a.at("id").get<int32_t>() + 1);
  for (auto a : variant.at("added")) {
    a["id"] = next_id++;
    j["added_tokens"].push_back(a);
  }
  const auto out = std::filesystem::temp_directory_path() /
                   ("vllm_tokenizer_" + name + "_" + std::to_string(::getpid()) + ".json");
  std::ofstream(out) << j.dump();
  return out.string();
}

class VariantTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(VariantTokenizer, MatchesFixtures) {
  std::string base;
  const std::string path = write_variant(GetParam(), base);
  if (path.empty()) GTEST_SKIP() << kSharedTokenizers << base << " is absent";
  const auto tok = Tokenizer::from_files(path, "");
  std::filesystem::remove(path);
  const auto report = testing::check_fixture(*tok, GetParam(), /*with_stream=*/true);
  std::cout << report.summary(GetParam()) << "\n";
  EXPECT_EQ(report.total(), 0u) << report.summary(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Patched, VariantTokenizer,
                         ::testing::Values("llama2_variant", "qwen3_variant"));

TEST(GgufTokenizer, SmolLM2MatchesFixtures) {
  const Tokenizer* tok = testing::test_tokenizer("smollm2_gguf");
  if (!tok) GTEST_SKIP() << testing::kSmolGguf << " is absent";
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->eos_token(), "<|im_end|>");
  EXPECT_TRUE(tok->is_special(2));
  ASSERT_TRUE(tok->chat_template().has_value());
  const auto report = testing::check_fixture(*tok, "smollm2_gguf", /*with_stream=*/true);
  std::cout << report.summary("smollm2_gguf") << "\n";
  EXPECT_EQ(report.total(), 0u) << report.summary("smollm2_gguf");
}

// A SentencePiece ("llama") GGUF vocabulary made from llama2's tokenizer.json by the rule of
// tools/make_tokenizer_fixtures.py (llama_gguf_from_hf); the oracle is transformers loading it.
GgufVocab llama_gguf_from_hf(const std::string& tokenizer_json) {
  std::ifstream in(tokenizer_json);
  const auto j = nlohmann::json::parse(in);
  const auto& vocab = j.at("model").at("vocab");
  std::set<std::string> special;
  for (const auto& a : j.at("added_tokens"))
    if (a.at("special").get<bool>()) special.insert(a.at("content").get<std::string>());
  GgufVocab v;
  v.model = "llama";
  v.tokens.resize(vocab.size());
  for (const auto& [token, id] : vocab.items()) v.tokens.at(id.get<size_t>()) = token;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string& t = v.tokens[i];
    const bool byte = t.size() == 6 && t.starts_with("<0x") && t.ends_with(">");
    const int32_t type = t == "<unk>" ? 2 : special.count(t) ? 3 : byte ? 6 : 1;
    v.token_types.push_back(type);
    v.scores.push_back(type == 1 ? -static_cast<float>(i) : 0.0f);
  }
  v.bos_id = vocab.at("<s>").get<int32_t>();
  v.eos_id = vocab.at("</s>").get<int32_t>();
  v.unk_id = vocab.at("<unk>").get<int32_t>();
  v.add_bos = true;
  v.add_eos = false;
  v.add_space_prefix = true;
  return v;
}

TEST(GgufTokenizer, LlamaVocabMatchesTransformers) {
  const std::string path = std::string(kSharedTokenizers) + "llama2/tokenizer.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  const auto tok = Tokenizer::from_gguf_vocab(llama_gguf_from_hf(path));
  EXPECT_EQ(tok->bos_token(), "<s>");
  EXPECT_EQ(tok->eos_token(), "</s>");
  EXPECT_TRUE(tok->is_special(0));  // transformers registers the unk token as special
  const auto report = testing::check_fixture(*tok, "llama2_gguf", /*with_stream=*/true);
  std::cout << report.summary("llama2_gguf") << "\n";
  EXPECT_EQ(report.total(), 0u) << report.summary("llama2_gguf");
}

// A byte-level GGUF vocabulary made from an HF tokenizer.json (tokens by id, merges, control
// tokens for special added tokens, user-defined for the others): with the right
// tokenizer.ggml.pre it must tokenize as the tokenizer.json does (without bos/eos, which GGUF
// flags decide).
GgufVocab gpt2_gguf_from_hf(const std::string& tokenizer_json, const std::string& pre) {
  std::ifstream in(tokenizer_json);
  const auto j = nlohmann::json::parse(in);
  GgufVocab v;
  v.model = "gpt2";
  v.pre = pre;
  std::map<int32_t, std::pair<std::string, int32_t>> by_id;  // id -> (token, type)
  for (const auto& [token, id] : j.at("model").at("vocab").items())
    by_id[id.get<int32_t>()] = {token, 1};
  for (const auto& a : j.at("added_tokens"))
    by_id[a.at("id").get<int32_t>()] = {a.at("content").get<std::string>(),
                                        a.at("special").get<bool>() ? 3 : 4};
  for (const auto& [id, entry] : by_id) {
    EXPECT_EQ(static_cast<size_t>(id), v.tokens.size()) << "ids must be contiguous";
    v.tokens.push_back(entry.first);
    v.token_types.push_back(entry.second);
  }
  for (const auto& m : j.at("model").at("merges"))
    v.merges.push_back(m.is_string()
                           ? m.get<std::string>()
                           : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
  v.add_bos = false;
  return v;
}

class GgufFromHf : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(GgufFromHf, MatchesTheTokenizerJsonFixtures) {
  const auto& [name, pre] = GetParam();
  const std::string path = std::string(kSharedTokenizers) + name + "/tokenizer.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  const auto tok = Tokenizer::from_gguf_vocab(gpt2_gguf_from_hf(path, pre));
  const auto report = testing::check_fixture(*tok, name, /*with_stream=*/true,
                                             /*with_added_specials=*/false);
  std::cout << report.summary(name + " as GGUF pre=" + pre) << "\n";
  EXPECT_EQ(report.total(), 0u) << report.summary(name);
}

// DeepSeek-LLM / V2 GGUF files name the "deepseek-llm" pre-tokenizer, which no shared
// tokenizer.json has: the oracle is llama.cpp itself, tokenizing DeepSeek-V3's vocabulary under
// that name (tools/make_deepseek_llm_fixture.py, fixtures/tokenizer/llamacpp_manifest.json).
TEST(GgufTokenizer, DeepseekLlmPreMatchesLlamaCpp) {
  const std::string path = std::string(kSharedTokenizers) + "deepseek_v3/tokenizer.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  const auto tok = Tokenizer::from_gguf_vocab(gpt2_gguf_from_hf(path, "deepseek-llm"));
  const auto report = testing::check_fixture(*tok, "deepseek_llm_gguf", /*with_stream=*/true,
                                             /*with_added_specials=*/false);
  std::cout << report.summary("deepseek_llm_gguf") << "\n";
  EXPECT_EQ(report.total(), 0u) << report.summary("deepseek_llm_gguf");
  // Short strings mixing Unicode whitespace with the characters the patterns' classes hold:
  // llama.cpp counts non-ASCII whitespace as \s but never as a member of those classes.
  std::ifstream probe("fixtures/tokenizer/deepseek_llm_probe.jsonl");
  ASSERT_TRUE(probe.good());
  size_t n = 0, bad = 0;
  for (std::string line; std::getline(probe, line); ++n) {
    const auto rec = nlohmann::json::parse(line);
    const std::string text = rec.at("t").get<std::string>();
    const auto want = rec.at("n").get<std::vector<int32_t>>();
    const auto got = tok->encode(text, false);
    if (got != want && ++bad <= 5) ADD_FAILURE() << "probe " << nlohmann::json(text).dump();
  }
  EXPECT_EQ(n, 600u);
  EXPECT_EQ(bad, 0u);
}

INSTANTIATE_TEST_SUITE_P(Shared, GgufFromHf,
                         ::testing::Values(std::pair{"llama3", "llama-bpe"},
                                           std::pair{"qwen3", "qwen2"},
                                           std::pair{"deepseek_v3", "deepseek-v3"}),
                         [](const auto& info) { return info.param.first; });

}  // namespace
}  // namespace vllm
