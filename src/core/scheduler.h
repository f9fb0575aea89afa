// Scheduler: vLLM's continuous-batching rule over integer ids. No prefill/decode phases: each
// step every request's num_computed_tokens catches up to its num_tokens under one token budget,
// running requests first, and a request the KV cache cannot hold is preempted by recompute.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/kv_cache_manager.h"
#include "core/request.h"
#include "core/request_queue.h"

namespace vllm::core {

struct SchedulerConfig {
  int max_num_seqs = 256;             // running requests at once
  int max_num_batched_tokens = 8192;  // token budget of one step
  int max_model_len = 8192;           // prompt + output tokens of one request
  int long_prefill_token_threshold = 0;  // > 0: cap on one request's tokens per step
  bool enable_chunked_prefill = true;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
};

enum class ScheduledKind {
  kNew,      // first time scheduled: the runner creates its state
  kResumed,  // back after preemption: the runner replaces its state, block tables included
  kRunning,  // running since an earlier step (not necessarily scheduled in the previous one)
};

// Block tables travel as in vLLM V1: whole for kNew and kResumed, as edits for kRunning, so a
// decode step costs O(changes), not O(context). A kRunning request's table after this step is
// its table from the step that last scheduled it, with new_block_ids appended and then its
// first num_null_blocks entries set to kNullBlockId (a sliding-window group releases blocks
// behind the window, front first; this is the only edit besides appending).
struct ScheduledRequest {
  std::string request_id;
  ScheduledKind kind = ScheduledKind::kNew;
  int num_computed_tokens = 0;   // position of the first scheduled token
  int num_scheduled_tokens = 0;  // tokens computed this step
  std::vector<int> token_ids;    // [num_scheduled_tokens], positions num_computed_tokens...
  std::vector<std::vector<int>> block_ids;      // kNew/kResumed: table per KV cache group
  std::vector<std::vector<int>> new_block_ids;  // kRunning: per group, appended this step
  // Per group: leading kNullBlockId entries of the table after this step. Empty when no group
  // has a sliding window (there are none then).
  std::vector<int> num_null_blocks;
  bool sample = false;  // the step reaches the request's last token: sample the next one
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;  // running requests first, then admitted ones
  int total_num_scheduled_tokens = 0;
  std::vector<std::string> preempted_req_ids;  // this step
  std::vector<std::string> finished_req_ids;   // since the previous step: drop runner state
  bool empty() const { return scheduled.empty(); }
};

struct RequestUpdate {
  std::string request_id;
  std::vector<int> new_token_ids;  // appended this step, cut after a stop token
  RequestStatus status = RequestStatus::kRunning;
  std::optional<int> stop_token_id;
  int num_cached_tokens = 0;  // prompt tokens served from the prefix cache
};

struct FinishedRequest {
  std::string request_id;
  RequestStatus status = RequestStatus::kFinishedStopped;
};

struct UpdateResult {
  std::vector<RequestUpdate> outputs;     // one per request that sampled this step
  std::vector<FinishedRequest> finished;  // requests finished by this update
};

struct SchedulerStats {
  int num_running = 0;
  int num_waiting = 0;
  double kv_cache_usage = 0.0;
  int64_t prefix_cache_queries = 0;  // tokens
  int64_t prefix_cache_hits = 0;     // tokens
  int64_t num_preemptions = 0;
};

class Scheduler {
 public:
  // Throws vllm::Error when the configs are inconsistent or the KV cache cannot hold one
  // request of max_model_len tokens.
  Scheduler(SchedulerConfig config, KvCacheConfig kv_cache_config);

  // Queues a request (status WAITING). Throws vllm::Error on a duplicate id, an empty prompt,
  // a prompt leaving no room below max_model_len, or bad max_tokens/min_tokens.
  void add_request(Request request);

  SchedulerOutput schedule();

  // Appends the sampled tokens of the last schedule()'s requests (keyed by request id),
  // checks stop conditions and frees finished requests. Tokens for a request still in a
  // prefill chunk, or for an unknown id, are ignored.
  UpdateResult update_from_output(
      const std::unordered_map<std::string, std::vector<int>>& sampled_token_ids);

  // Finishes a waiting or running request; false if unknown or already finished.
  bool abort_request(const std::string& request_id);
  // As abort_request with another reason (stop strings found by the detokenizer).
  bool finish_request(const std::string& request_id, RequestStatus status);

  bool has_unfinished() const { return !running_.empty() || !waiting_.empty(); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  // nullptr once finished (finished requests are dropped).
  const Request* get_request(const std::string& request_id) const;
  SchedulerStats stats() const;
  const KvCapacity& kv_capacity() const { return kv_capacity_; }
  KvCacheManager& kv_cache_manager() { return kv_cache_manager_; }
  const KvCacheManager& kv_cache_manager() const { return kv_cache_manager_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  struct Entry {
    Request* request;
    int num_new_tokens;
    ScheduledKind kind;
    KvBlocks new_blocks;  // kRunning: what allocate_slots appended
  };

  void schedule_running(std::vector<Entry>& scheduled, std::vector<Request*>& preempted,
                        int& token_budget);
  void schedule_waiting(std::vector<Entry>& scheduled, int& token_budget);
  Request* pick_preemption_victim() const;
  void preempt(Request* request);
  bool check_stop(Request& request) const;
  void finish(Request* request, RequestStatus status);

  SchedulerConfig config_;
  KvCacheManager kv_cache_manager_;
  KvCapacity kv_capacity_;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  RequestQueue waiting_;
  std::vector<Request*> running_;  // in scheduling order
  // Requests of the last schedule() whose output is not processed yet, with the
  // num_computed_tokens they had before that step.
  std::vector<std::pair<std::string, int>> in_flight_;
  std::vector<std::string> finished_req_ids_;
  uint64_t next_arrival_seq_ = 0;
  int64_t num_preemptions_ = 0;
};

}  // namespace vllm::core
