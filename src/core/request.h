// Request: one sequence's token ids, stop parameters and scheduling state, as the engine core
// sees it. Invariant: all_token_ids() == prompt_token_ids() + output_token_ids(), append-only.
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/block_hash.h"

namespace vllm::core {

enum class RequestStatus {
  kWaiting,
  kRunning,
  kPreempted,
  kFinishedStopped,  // EOS or a stop token (stop strings: finish_request from the detokenizer)
  kFinishedLength,   // max_tokens or max_model_len
  kFinishedAborted,
  kFinishedError,    // the request's own input failed mid-generation (a grammar past its limits)
};

inline bool is_finished(RequestStatus s) { return s >= RequestStatus::kFinishedStopped; }
// OpenAI finish_reason: "stop", "length", "abort", "error"; nullptr while unfinished.
const char* finish_reason(RequestStatus s);
const char* to_string(RequestStatus s);

class Request {
 public:
  Request(std::string request_id, std::vector<int> prompt_token_ids)
      : request_id_(std::move(request_id)),
        num_prompt_tokens_(static_cast<int>(prompt_token_ids.size())),
        all_token_ids_(std::move(prompt_token_ids)) {}

  const std::string& request_id() const { return request_id_; }
  std::span<const int> all_token_ids() const { return all_token_ids_; }
  std::span<const int> prompt_token_ids() const {
    return std::span<const int>(all_token_ids_).first(num_prompt_tokens_);
  }
  std::span<const int> output_token_ids() const {
    return std::span<const int>(all_token_ids_).subspan(num_prompt_tokens_);
  }
  int num_tokens() const { return static_cast<int>(all_token_ids_.size()); }
  int num_prompt_tokens() const { return num_prompt_tokens_; }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens_; }
  void append_output_token_id(int token_id) { all_token_ids_.push_back(token_id); }

  // Block hashes of the full blocks of all_token_ids(), extended lazily by the KvCacheManager
  // (tokens are append-only, so earlier hashes stay valid across preemption).
  std::vector<BlockHash> block_hashes;

  // Sampling-side stop parameters (vLLM's SamplingParams subset the scheduler checks).
  int max_tokens = std::numeric_limits<int>::max();
  int min_tokens = 0;
  bool ignore_eos = false;
  std::vector<int> eos_token_ids;
  std::vector<int> stop_token_ids;
  // Lower value is scheduled first under the PRIORITY policy (vLLM's convention).
  int priority = 0;
  // Non-empty: isolates this request's prefix cache from requests with another salt.
  std::string cache_salt;
  // Computes every prompt token even where the prefix cache holds them (vLLM's
  // skip_reading_prefix_cache): prompt logprobs need the logits of every position. Its own
  // blocks are still cached for others.
  bool skip_reading_prefix_cache = false;

  // Scheduler-owned state.
  RequestStatus status = RequestStatus::kWaiting;
  // Tokens whose KV is written (or scheduled to be written this step).
  int num_computed_tokens = 0;
  // Prompt tokens served from the prefix cache at first scheduling; -1 until then.
  int num_cached_tokens = -1;
  uint64_t arrival_seq = 0;  // assigned by Scheduler::add_request
  int num_preemptions = 0;
  std::optional<int> stop_token_id;  // the stop token that finished it (vLLM's stop_reason)

 private:
  std::string request_id_;
  int num_prompt_tokens_;
  std::vector<int> all_token_ids_;
};

}  // namespace vllm::core
