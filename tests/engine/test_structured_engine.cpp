// Structured output through the engine on SmolLM2: grammar-constrained requests batched with
// others, chunked, preempted and recomputed, with n > 1, give the tokens they give alone in a
// roomy engine, and what they produce parses as its constraint says (checked with nlohmann's
// JSON parser and std::regex, not with the grammar engine itself).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "engine/engine_core.h"
#include "model/load.h"
#include "structured/compiler.h"

using namespace vllm;
using structured::OutputConstraint;

namespace {

const char* kSmolGguf = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

struct Out {
  std::vector<int32_t> tokens;
  std::string text, finish_reason;
};

std::map<std::string, Out> run_structured(EngineCore& core) {
  std::map<std::string, Out> done;
  for (int guard = 0; core.has_unfinished(); ++guard) {
    EXPECT_LT(guard, 100000) << "engine does not finish";
    for (const RequestOutput& o : core.step()) {
      Out& d = done[o.request_id + "/" + std::to_string(o.index)];
      d.tokens.insert(d.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      d.text += o.text_delta;
      if (o.finished) d.finish_reason = o.finish_reason;
    }
  }
  return done;
}

const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":12},
  "age":{"type":"integer","minimum":0,"maximum":99},
  "pet":{"enum":["cat","dog","none"]}},
  "required":["name","age","pet"],"additionalProperties":false})";
const char* kRegex = R"([A-Z][a-z]{1,8} [0-9]{2})";
const std::vector<std::string> kChoices = {"red", "green", "blue"};

void check_output(const std::string& kind, const Out& o) {
  if (o.finish_reason != "stop") return;  // a cut answer is only a prefix
  if (kind == "json") {
    const auto j = nlohmann::json::parse(o.text);  // throws: the test fails
    ASSERT_TRUE(j.is_object()) << o.text;
    ASSERT_EQ(j.size(), 3u) << o.text;
    EXPECT_LE(j["name"].get<std::string>().size(), 12u) << o.text;
    EXPECT_GE(j["age"].get<int>(), 0);
    EXPECT_LE(j["age"].get<int>(), 99);
    const std::string pet = j["pet"];
    EXPECT_TRUE(pet == "cat" || pet == "dog" || pet == "none") << o.text;
  } else if (kind == "regex") {
    EXPECT_TRUE(std::regex_match(o.text, std::regex(kRegex))) << o.text;
  } else {
    EXPECT_NE(std::find(kChoices.begin(), kChoices.end(), o.text), kChoices.end()) << o.text;
  }
}

}  // namespace

TEST(StructuredEngine, BatchedChunkedPreemptedEqualsAloneSmolLM2) {
  if (!std::filesystem::exists(kSmolGguf)) GTEST_SKIP() << kSmolGguf << " absent";
  LoadedModel m = load_model(kSmolGguf);
  structured::GrammarCache cache(structured::TokenVocab::from_tokenizer(
      *m.tokenizer, m.model->config().eos_token_ids, m.model->config().vocab_size));
  std::map<std::string, std::shared_ptr<const structured::CompiledGrammar>> grammars;
  grammars["json"] = cache.get({OutputConstraint::Kind::kJsonSchema, kSchema, {}, {}});
  grammars["regex"] = cache.get({OutputConstraint::Kind::kRegex, kRegex, {}, {}});
  grammars["choice"] = cache.get({OutputConstraint::Kind::kChoice, "", kChoices, {}});
  const std::vector<std::string> kinds = {"json", "regex", "choice", "none"};

  struct Req {
    std::string id, kind;
    std::vector<int32_t> prompt;
    SamplingParams params;
  };
  std::vector<Req> reqs;
  std::mt19937 rng(5);
  for (int i = 0; i < 16; ++i) {
    Req r;
    r.kind = kinds[i % kinds.size()];
    r.id = r.kind + std::to_string(i);
    const std::string text = r.kind == "json" ? "Give a person as JSON:" :
                             r.kind == "regex" ? "A name and a number:" : "A colour:";
    r.prompt = m.tokenizer->encode(text + std::string(rng() % 40, ' ') + "ok");
    r.params.max_tokens = 60;
    r.params.temperature = i % 2 ? 1.0f : 0.0f;
    r.params.seed = 100 + i;
    r.params.n = i % 3 == 0 ? 2 : 1;
    if (r.kind != "none") r.params.grammar = grammars[r.kind];
    reqs.push_back(std::move(r));
  }
  EngineConfig tight;
  tight.max_model_len = 128;
  tight.block_size = 16;
  tight.max_num_batched_tokens = 32;  // prompts arrive in chunks
  tight.kv_cache_memory = 300 * m.model->kv_bytes_per_token();  // ~3 requests
  EngineCore batched(*m.model, m.tokenizer.get(), tight);
  for (const Req& r : reqs) batched.add_request(r.id, r.prompt, r.params);
  auto together = run_structured(batched);
  EXPECT_GT(batched.stats().num_preemptions, 0) << "the tight cache should have preempted";

  EngineConfig roomy;
  roomy.max_model_len = 128;
  int checked = 0, stopped = 0;
  for (const Req& r : reqs) {
    EngineCore alone(*m.model, m.tokenizer.get(), roomy);
    alone.add_request("x", r.prompt, r.params);
    auto single = run_structured(alone);
    for (int k = 0; k < r.params.n; ++k) {
      const Out& a = single["x/" + std::to_string(k)];
      const Out& b = together[r.id + "/" + std::to_string(k)];
      EXPECT_EQ(a.tokens, b.tokens) << r.id << " completion " << k;
      EXPECT_EQ(a.finish_reason, b.finish_reason) << r.id;
      if (r.kind == "none") continue;
      check_output(r.kind, b);
      ++checked;
      stopped += b.finish_reason == "stop";
    }
  }
  EXPECT_GE(checked, 12);
  EXPECT_GE(stopped, checked - 2) << "most constrained completions should finish by the grammar";
}

// params.grammar_after (a reasoning parser's end tag): sampling is free until the output holds
// that text (or the token grammar_after_token), then the grammar applies. Checked against the
// unconstrained greedy run: the same first tokens, then exactly what the grammar allows.
TEST(StructuredEngine, GrammarStartsAfterTheMarkerSmolLM2) {
  if (!std::filesystem::exists(kSmolGguf)) GTEST_SKIP() << kSmolGguf << " absent";
  LoadedModel m = load_model(kSmolGguf);
  structured::GrammarCache cache(structured::TokenVocab::from_tokenizer(
      *m.tokenizer, m.model->config().eos_token_ids, m.model->config().vocab_size));
  const auto zzz = cache.get({OutputConstraint::Kind::kRegex, "zzz", {}, {}});
  const std::vector<int32_t> prompt = m.tokenizer->encode("Name a colour:");
  EngineConfig config;
  config.max_model_len = 128;
  auto run = [&](const SamplingParams& p) {
    EngineCore core(*m.model, m.tokenizer.get(), config);
    core.add_request("r", prompt, p);
    return run_structured(core)["r/0"];
  };
  SamplingParams unconstrained;
  unconstrained.max_tokens = 6;
  unconstrained.temperature = 0.0f;
  const Out plain = run(unconstrained);
  ASSERT_GE(plain.tokens.size(), 3u);
  std::string marker;
  for (int i = 0; i < 2; ++i) marker += *cache.vocab()->token_bytes(plain.tokens[i]);

  SamplingParams gated = unconstrained;
  gated.max_tokens = 20;
  gated.grammar = zzz;
  gated.grammar_after = marker;
  const Out by_text = run(gated);
  ASSERT_GE(by_text.tokens.size(), 2u);
  EXPECT_EQ(std::vector<int32_t>(by_text.tokens.begin(), by_text.tokens.begin() + 2),
            std::vector<int32_t>(plain.tokens.begin(), plain.tokens.begin() + 2));
  EXPECT_EQ(by_text.text, marker + "zzz");
  EXPECT_EQ(by_text.finish_reason, "stop");

  gated.grammar_after = "\x01 never in the output";
  gated.grammar_after_token = plain.tokens[0];
  const Out by_token = run(gated);
  EXPECT_EQ(by_token.tokens.at(0), plain.tokens[0]);
  EXPECT_EQ(by_token.text, *cache.vocab()->token_bytes(plain.tokens[0]) + "zzz");
  EXPECT_EQ(by_token.finish_reason, "stop");
}
