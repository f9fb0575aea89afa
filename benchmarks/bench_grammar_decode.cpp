// Share of CPU decode time spent on structured-output masks: `batch` requests under one JSON
// schema (temperature 1, seeded) run together through EngineCore; then each request's output is
// replayed through a fresh matcher, timing the masks the runner computed for it. Prints one
// JSON line: the run's wall time, the masks' total, their share, and the same batch without a
// grammar (for scale).
//   bench_grammar_decode GGUF [batch] [max_tokens]
#include <chrono>
#include <cstdio>
#include <map>

#include "engine/engine_core.h"
#include "model/load.h"
#include "structured/compiler.h"

using namespace vllm;
using Clock = std::chrono::steady_clock;

namespace {

const char* kSchema = R"({"type":"object","properties":{
  "location":{"type":"string","maxLength":24},
  "unit":{"type":"string","enum":["celsius","fahrenheit"]},
  "days":{"type":"integer","minimum":1,"maximum":7},
  "details":{"type":"array","items":{"type":"string","maxLength":16},"maxItems":3}},
  "required":["location","unit","days"],"additionalProperties":false})";

double seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s GGUF [batch] [max_tokens]\n", argv[0]);
    return 2;
  }
  try {
    const int batch = argc > 2 ? std::atoi(argv[2]) : 64;
    const int max_tokens = argc > 3 ? std::atoi(argv[3]) : 64;
    LoadedModel m = load_model(argv[1]);
    structured::GrammarCache cache(structured::TokenVocab::from_tokenizer(
        *m.tokenizer, m.model->config().eos_token_ids, m.model->config().vocab_size));
    const auto t_compile = Clock::now();
    auto grammar = cache.get({structured::OutputConstraint::Kind::kJsonSchema, kSchema, {}, {}});
    const double compile_s = seconds(t_compile);
    EngineConfig cfg;
    cfg.max_model_len = 512;
    cfg.max_num_seqs = batch;
    cfg.kv_cache_memory = int64_t(batch) * 512 * m.model->kv_bytes_per_token();
    const auto run = [&](bool constrained, std::map<std::string, std::vector<int32_t>>& out) {
      EngineCore core(*m.model, m.tokenizer.get(), cfg);
      for (int i = 0; i < batch; ++i) {
        SamplingParams p;
        p.temperature = 1.0f;
        p.seed = i;
        p.max_tokens = max_tokens;
        if (constrained) p.grammar = grammar;
        else p.ignore_eos = true;
        core.add_request(std::to_string(i),
                         m.tokenizer->encode("Weather query " + std::to_string(i) + " as JSON:"), p);
      }
      const auto t0 = Clock::now();
      while (core.has_unfinished())
        for (const RequestOutput& o : core.step())
          out[o.request_id].insert(out[o.request_id].end(), o.new_token_ids.begin(),
                                   o.new_token_ids.end());
      return seconds(t0);
    };
    std::map<std::string, std::vector<int32_t>> with, without;
    const double t_with = run(true, with);
    const double t_without = run(false, without);
    // A fresh compile, so the replay does not find the masks the run left in the grammar's
    // shared cache; its requests share one as the run's did.
    grammar = structured::compile({structured::OutputConstraint::Kind::kJsonSchema, kSchema, {}, {}},
                                  cache.vocab());
    double mask_s = 0;
    size_t tokens = 0;
    std::vector<uint32_t> mask(grammar->vocab->mask_words());
    for (const auto& [id, toks] : with) {
      structured::GrammarMatcher matcher(grammar);
      for (int32_t t : toks) {
        const auto t0 = Clock::now();
        matcher.fill_mask(mask);
        mask_s += seconds(t0);
        ++tokens;
        if (!matcher.accept_token(t)) break;
      }
    }
    size_t tokens_without = 0;
    for (const auto& [id, toks] : without) tokens_without += toks.size();
    std::printf("{\"batch\": %d, \"compile_ms\": %.3f, \"constrained_s\": %.3f, \"tokens\": %zu, "
                "\"mask_s\": %.4f, \"mask_share\": %.4f, \"mask_ms_per_token\": %.4f, "
                "\"unconstrained_s\": %.3f, \"unconstrained_tokens\": %zu}\n",
                batch, compile_s * 1e3, t_with, tokens, mask_s, mask_s / t_with,
                tokens ? mask_s * 1e3 / tokens : 0.0, t_without, tokens_without);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
