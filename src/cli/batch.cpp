// `vllm-cpp generate --input prompts.jsonl --output results.jsonl`: offline batches through the
// engine core, as vLLM's LLM.generate. Output lines keep the input order.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>

#include "cli/batch.h"
#include "engine/async_engine.h"
#include "engine/params_json.h"
#include "engine/remote_ranks.h"
#include "util/check.h"

namespace vllm::cli {
namespace {

using nlohmann::json;

struct Completion {
  std::string text;
  std::vector<int32_t> token_ids;
  json logprobs = json::array();
  std::string finish_reason;
  std::optional<std::string> stop_reason;
  std::string error;  // finish_reason "error": why
};

struct Result {
  std::optional<std::string> error;
  std::vector<Completion> completions;
  json prompt_logprobs;
  int num_prompt_tokens = 0;
};

}  // namespace

int run_batch(LoadedModel& m, const EngineConfig& config, const std::string& input,
              const std::string& output, NodeGroup* group) {
  std::ifstream in(input);
  if (!in) throw Error(input + ": cannot open");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);

  // Node 0 of a group spanning processes: the other nodes run the same steps.
  std::unique_ptr<RemoteRanks> remote;
  if (group) remote = std::make_unique<RemoteRanks>(*group, m.ranks());
  auto core = std::make_unique<EngineCore>(m.ranks(), m.tokenizer.get(), config, remote.get());
  if (!core->memory_summary().empty())
    std::fprintf(stderr, "%s\n", core->memory_summary().c_str());
  std::fprintf(stderr, "%s\n", core->kv_capacity().summary.c_str());
  AsyncEngine engine(std::move(core));

  std::vector<Result> results(lines.size());
  std::mutex mu;
  std::condition_variable cv;
  size_t pending = 0;
  int64_t generated = 0, prompt_tokens = 0;
  std::string engine_error;  // the engine failed (every request then ends with it)
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < lines.size(); ++i) {
    try {
      const json j = json::parse(lines[i]);
      if (!j.is_object() || !j.contains("prompt")) throw Error("each line needs a \"prompt\"");
      const auto prompt = prompt_from_json(j["prompt"], m.tokenizer.get());
      const SamplingParams params = sampling_params_from_json(j, m.tokenizer.get());
      results[i].completions.resize(params.n);
      results[i].num_prompt_tokens = static_cast<int>(prompt.size());
      {
        std::lock_guard lock(mu);
        pending += params.n;
        prompt_tokens += static_cast<int64_t>(prompt.size());
      }
      const Tokenizer* tok = m.tokenizer.get();
      engine.add_request(std::to_string(i), prompt, params, [&, i, tok](const RequestOutput& o) {
        std::lock_guard lock(mu);
        Completion& c = results[i].completions[o.index];
        c.text += o.text_delta;
        c.token_ids.insert(c.token_ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        generated += static_cast<int64_t>(o.new_token_ids.size());
        for (const auto& lp : o.logprobs) c.logprobs.push_back(logprobs_to_json(lp, tok));
        if (!o.prompt_logprobs.empty()) {
          json pl = json::array();
          for (const auto& lp : o.prompt_logprobs) pl.push_back(lp ? logprobs_to_json(*lp, tok) : json());
          results[i].prompt_logprobs = std::move(pl);
        }
        if (o.finished) {
          c.finish_reason = o.finish_reason;
          c.stop_reason = o.stop_reason;
          c.error = o.error;
          if (o.engine_failed && engine_error.empty()) engine_error = o.error;
          if (--pending == 0) cv.notify_all();
        }
      });
    } catch (const std::exception& e) {
      std::lock_guard lock(mu);
      if (!results[i].completions.empty()) pending -= results[i].completions.size();
      results[i].completions.clear();
      results[i].error = std::string("line ") + std::to_string(i + 1) + ": " + e.what();
    }
  }
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return pending == 0; });
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::ofstream out(output);
  if (!out) throw Error(output + ": cannot write");
  int errors = 0;
  for (const Result& r : results) {
    json line;
    if (r.error) {
      ++errors;
      line = {{"error", *r.error}};
    } else {
      json outs = json::array();
      for (const Completion& c : r.completions) {
        json o = {{"text", c.text}, {"token_ids", c.token_ids}, {"finish_reason", c.finish_reason}};
        if (c.stop_reason) o["stop_reason"] = *c.stop_reason;
        if (!c.error.empty()) o["error"] = c.error;
        if (!c.logprobs.empty()) o["logprobs"] = c.logprobs;
        outs.push_back(std::move(o));
      }
      line = outs[0];
      line["num_prompt_tokens"] = r.num_prompt_tokens;
      if (!r.prompt_logprobs.is_null()) line["prompt_logprobs"] = r.prompt_logprobs;
      if (outs.size() > 1) line["outputs"] = std::move(outs);
    }
    out << line.dump() << "\n";
  }
  std::fprintf(stderr,
               "%zu requests in %.2fs: %.1f output tok/s, %.1f total tok/s (prompt %lld, "
               "generated %lld tokens)%s\n",
               lines.size(), secs, generated / secs, (generated + prompt_tokens) / secs,
               static_cast<long long>(prompt_tokens), static_cast<long long>(generated),
               errors ? (", " + std::to_string(errors) + " lines rejected").c_str() : "");
  if (!engine_error.empty()) {
    std::fprintf(stderr, "error: %s\n", engine_error.c_str());
    return 1;
  }
  return errors ? 1 : 0;
}

}  // namespace vllm::cli
