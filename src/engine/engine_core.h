// EngineCore: one step = schedule -> run the model -> sample -> update; plus the output side
// of each request (incremental detokenization, stop strings, n > 1 fan-out). Not thread-safe:
// AsyncEngine drives it from its own thread.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/scheduler.h"
#include "engine/executor.h"
#include "engine/request_stats.h"
#include "tokenizer/tokenizer.h"

namespace vllm {

struct EngineConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int max_model_len = 0;  // 0: the model's max_position_embeddings
  int block_size = 16;
  int64_t kv_cache_memory = int64_t(1) << 30;  // bytes for K/V of all layers
  // On a GPU, when > 0: the KV cache takes what is left of this fraction of the device's
  // memory after the weights and a step's activations (vLLM's --gpu-memory-utilization),
  // instead of kv_cache_memory.
  double gpu_memory_utilization = 0.0;
  bool enable_prefix_caching = true;
  // vLLM's --disable-hybrid-kv-cache-manager: windowed layers keep every block, as global
  // ones do (attention still reads only the window).
  bool disable_hybrid_kv_cache_manager = false;
  bool priority_policy = false;  // else FCFS
  uint64_t seed = 0;             // base seed for requests without their own
};

struct StepLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
};

// What one request produced in one step (deltas), for one of its n completions.
struct RequestOutput {
  std::string request_id;
  int index = 0;  // completion index, 0..n-1
  std::vector<int32_t> new_token_ids;
  std::string text_delta;
  std::vector<StepLogprobs> logprobs;         // one per new token, when asked
  std::vector<std::optional<StepLogprobs>> prompt_logprobs;  // first output only, when asked
  bool finished = false;
  std::string finish_reason;                 // "stop", "length", "abort", "error"
  std::optional<std::string> stop_reason;    // the stop string, or the stop token id as text
  std::string error;                         // finish_reason "error": what went wrong
  bool engine_failed = false;  // the engine's error (AsyncEngine::failure), not the request's
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;
};

// On a GPU: the KV cache budget of the tightest of `ranks` (a profile run of all of them at
// once, as vLLM's), with a line on how the memory was split.
struct KvBudget {
  int64_t bytes = 0;
  std::string memory;
};
KvBudget profile_kv_budget(const EngineConfig& c, const std::vector<const DecoderModel*>& ranks);

class EngineCore {
 public:
  EngineCore(const DecoderModel& model, const Tokenizer* tokenizer, EngineConfig config);
  // Tensor parallel: one shard per rank, rank 0 first (see Executor). The KV cache budget is
  // per rank; every rank holds the same blocks with its share of the KV heads. `remote`: the
  // ranks of the other nodes when the group spans processes (engine/remote_ranks.h).
  EngineCore(std::vector<const DecoderModel*> ranks, const Tokenizer* tokenizer,
             EngineConfig config, RemoteRanks* remote = nullptr);
  ~EngineCore();

  // Queues a request; throws vllm::Error with a user-facing message for invalid input
  // (duplicate id, empty or too long prompt, bad parameters). `arrival`: when the frontend
  // took it (unset: now), the start of its e2e latency and time to first token.
  void add_request(const std::string& id, std::vector<int32_t> prompt, SamplingParams params,
                   int priority = 0, StatsClock::time_point arrival = {});
  // The checks of add_request that need no engine state (all but the duplicate id): reads
  // only the configuration, so any thread may call it while another steps.
  void validate_request(const std::vector<int32_t>& prompt, const SamplingParams& params) const;
  // Finishes all completions of a request; their blocks return to the pool. False if unknown.
  bool abort_request(const std::string& id);
  // The indices of a request's completions that have not finished (none if unknown).
  std::vector<int> live_completions(const std::string& id) const;
  // One step. `leaving(id)`, if given, says whether request `id` is about to be aborted: when
  // every request of the step is, the forward stops at the next layer and the step ends with
  // no new tokens (the caller then aborts them; the scheduler forgets the blocks cached for
  // the step). A long CPU step so never outlives its clients by more than a layer.
  std::vector<RequestOutput> step(const std::function<bool(const std::string&)>& leaving = {});
  // What the steps and aborts since the last call measured; they pile up until taken
  // (AsyncEngine takes them after every step).
  IterationStats take_iteration_stats() { return std::exchange(iteration_stats_, {}); }
  bool has_unfinished() const { return scheduler_.has_unfinished(); }
  core::SchedulerStats stats() const { return scheduler_.stats(); }
  const core::KvCapacity& kv_capacity() const { return scheduler_.kv_capacity(); }
  // How the GPU memory budget was split at start-up (empty on the CPU).
  const std::string& memory_summary() const { return memory_summary_; }
  const core::KvCacheManager& kv_cache_manager() const { return scheduler_.kv_cache_manager(); }
  const EngineConfig& config() const { return config_; }
  int max_model_len() const { return config_.max_model_len; }

 private:
  struct Completion;  // per child request: detokenizer and stop-string state

  void emit_text(Completion& c, RequestOutput& out, bool final);
  void record_tokens(Completion& c, const core::RequestUpdate& u, int num_new,
                     StatsClock::time_point now);
  // Drops runner and output state; records the completion's stats as finished for `reason`.
  void finish_child(const std::string& child_id, const std::string& reason,
                    StatsClock::time_point now);

  const DecoderModel& model_;
  const Tokenizer* tokenizer_;
  std::string memory_summary_;  // before config_, which fills it
  EngineConfig config_;
  core::Scheduler scheduler_;
  std::unique_ptr<Executor> runner_;
  std::unordered_map<std::string, std::unique_ptr<Completion>> children_;
  struct Parent {
    std::vector<std::string> children;  // live ones
    int n = 1;
    int max_generation_tokens = 0;  // over its finished completions
  };
  std::unordered_map<std::string, Parent> parents_;
  IterationStats iteration_stats_;
  std::vector<RequestOutput> pending_;  // outputs produced outside step() (aborts)
  uint64_t next_seed_ = 0;
};

}  // namespace vllm
