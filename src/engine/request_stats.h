// What the engine measured in one step, for the Prometheus metrics (vLLM's IterationStats and
// FinishedRequestStats). EngineCore fills it on the engine thread with a few clock reads per
// request event: arrival, queued, first scheduled, each step with new tokens, finished.
#pragma once
#include <chrono>
#include <string>
#include <vector>

namespace vllm {

using StatsClock = std::chrono::steady_clock;

// Per completion (child request); unset time points are StatsClock::time_point{}.
struct RequestTimes {
  StatsClock::time_point arrival;      // the frontend took the request
  StatsClock::time_point queued;       // the engine queued it
  StatsClock::time_point scheduled;    // first scheduled (preemptions do not move it)
  StatsClock::time_point first_token;  // the step that produced its first token ended
  StatsClock::time_point last_token;
  int num_generation_tokens = 0;
  int num_preemptions = 0;
};

// Intervals as vLLM defines them: queued = first scheduled - queued, prefill = first token -
// first scheduled, decode = last token - first token, inference = last token - first scheduled
// (preemptions included), mean time per output token = decode / (tokens - 1).
struct FinishedRequestStats {
  std::string finish_reason;  // "stop", "length", "abort", "error"
  double e2e_latency = 0, queued_time = 0, prefill_time = 0, decode_time = 0,
         inference_time = 0, mean_time_per_output_token = 0;
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;
  int num_generation_tokens = 0;
  int max_tokens_param = 0;
  int num_preemptions = 0;
};

// `reason` ends the request at `now`; phases it never reached take zero length.
inline FinishedRequestStats finished_stats(RequestTimes t, std::string reason, int num_prompt_tokens,
                                           int num_cached_tokens, int max_tokens,
                                           StatsClock::time_point now) {
  const StatsClock::time_point unset{};
  if (t.scheduled == unset) t.scheduled = now;
  if (t.first_token == unset) t.first_token = t.last_token = t.scheduled;
  auto secs = [](StatsClock::duration d) { return std::chrono::duration<double>(d).count(); };
  FinishedRequestStats f;
  f.finish_reason = std::move(reason);
  f.e2e_latency = secs(now - t.arrival);
  f.queued_time = secs(t.scheduled - t.queued);
  f.prefill_time = secs(t.first_token - t.scheduled);
  f.decode_time = secs(t.last_token - t.first_token);
  f.inference_time = secs(t.last_token - t.scheduled);
  f.mean_time_per_output_token =
      t.num_generation_tokens > 1 ? f.decode_time / (t.num_generation_tokens - 1) : 0.0;
  f.num_prompt_tokens = num_prompt_tokens;
  f.num_cached_tokens = num_cached_tokens;
  f.num_generation_tokens = t.num_generation_tokens;
  f.max_tokens_param = max_tokens;
  f.num_preemptions = t.num_preemptions;
  return f;
}

struct IterationStats {
  bool stepped = false;           // the model ran (else only aborts happened)
  int num_scheduled_tokens = 0;   // tokens the step ran, prefill chunks and decodes
  int num_prompt_tokens = 0;      // of requests whose first token came this step
  int num_cached_prompt_tokens = 0;  // of those, served by the prefix cache
  int num_generation_tokens = 0;
  std::vector<double> time_to_first_tokens;   // arrival -> first token
  std::vector<double> inter_token_latencies;  // per step with new tokens after the first
  std::vector<int> n_params;                   // per finished parent request
  std::vector<int> max_num_generation_tokens;  // per finished parent: its longest completion
  std::vector<FinishedRequestStats> finished;  // per completion
};

}  // namespace vllm
