#include "core/scheduler.h"

#include <algorithm>

#include "util/check.h"

namespace vllm::core {
namespace {

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

const SchedulerConfig& validated(const SchedulerConfig& c) {
  if (c.max_num_seqs <= 0 || c.max_num_batched_tokens <= 0 || c.max_model_len <= 1)
    throw Error(detail::cat("scheduler config: max_num_seqs (", c.max_num_seqs,
                            ") and max_num_batched_tokens (", c.max_num_batched_tokens,
                            ") must be positive and max_model_len (", c.max_model_len,
                            ") above 1"));
  if (!c.enable_chunked_prefill && c.max_num_batched_tokens < c.max_model_len)
    throw Error(detail::cat("max_num_batched_tokens (", c.max_num_batched_tokens,
                            ") is smaller than max_model_len (", c.max_model_len,
                            "): without chunked prefill a long prompt could never be "
                            "scheduled; raise max_num_batched_tokens or enable chunked prefill"));
  return c;
}

}  // namespace

Scheduler::Scheduler(SchedulerConfig config, KvCacheConfig kv_cache_config)
    : config_(validated(config)),
      kv_cache_manager_(kv_cache_config),
      kv_capacity_(check_kv_capacity(kv_cache_config, config_.max_model_len,
                                     config_.max_num_batched_tokens)),
      waiting_(config_.policy) {}

void Scheduler::add_request(Request request) {
  const std::string& id = request.request_id();
  if (id.empty()) throw Error("request id is empty");
  if (requests_.count(id)) throw Error(detail::cat("request id '", id, "' is already in use"));
  const int n = request.num_prompt_tokens();
  if (n == 0) throw Error(detail::cat("request '", id, "': the prompt is empty"));
  if (request.num_output_tokens() != 0)
    throw Error(detail::cat("request '", id, "' already has output tokens"));
  if (n >= config_.max_model_len)
    throw Error(detail::cat("request '", id, "': the prompt (", n,
                            " tokens) leaves no room to generate within the maximum model "
                            "length of ", config_.max_model_len));
  if (request.max_tokens < 1 || request.min_tokens < 0 ||
      request.min_tokens > request.max_tokens)
    throw Error(detail::cat("request '", id, "': need max_tokens >= 1 and 0 <= min_tokens <= "
                            "max_tokens, got max_tokens ", request.max_tokens, ", min_tokens ",
                            request.min_tokens));
  auto owned = std::make_unique<Request>(std::move(request));
  owned->status = RequestStatus::kWaiting;
  owned->num_computed_tokens = 0;
  owned->arrival_seq = next_arrival_seq_++;
  waiting_.add(owned.get());
  requests_.emplace(owned->request_id(), std::move(owned));
}

Request* Scheduler::pick_preemption_victim() const {
  if (config_.policy == SchedulingPolicy::kFcfs) return running_.back();
  // Lowest priority (largest value), latest arrival among equals.
  return *std::max_element(running_.begin(), running_.end(), [](Request* a, Request* b) {
    if (a->priority != b->priority) return a->priority < b->priority;
    return a->arrival_seq < b->arrival_seq;
  });
}

void Scheduler::preempt(Request* request) {
  kv_cache_manager_.free(request->request_id());
  request->status = RequestStatus::kPreempted;
  request->num_computed_tokens = 0;
  ++request->num_preemptions;
  ++num_preemptions_;
  waiting_.prepend(request);
}

void Scheduler::schedule_running(std::vector<Entry>& scheduled,
                                 std::vector<Request*>& preempted, int& token_budget) {
  size_t i = 0;
  while (i < running_.size() && token_budget > 0) {
    Request* req = running_[i];
    int n = req->num_tokens() - req->num_computed_tokens;
    if (config_.long_prefill_token_threshold > 0)
      n = std::min(n, config_.long_prefill_token_threshold);
    n = std::min(n, token_budget);
    // The input position stays below max_model_len.
    n = std::min(n, config_.max_model_len - 1 - req->num_computed_tokens);
    if (n <= 0) {
      ++i;
      continue;
    }
    std::optional<KvBlocks> blocks;
    bool preempted_self = false;
    while (!(blocks = kv_cache_manager_.allocate_slots(*req, n))) {
      Request* victim = pick_preemption_victim();
      const size_t vi = std::find(running_.begin(), running_.end(), victim) - running_.begin();
      running_.erase(running_.begin() + vi);
      if (vi < i) --i;
      // A victim scheduled earlier in this step (PRIORITY only) gives back its tokens.
      auto e = std::find_if(scheduled.begin(), scheduled.end(),
                            [&](const Entry& x) { return x.request == victim; });
      if (e != scheduled.end()) {
        token_budget += e->num_new_tokens;
        scheduled.erase(e);
        // Its blocks were cached as if this step ran; it will not.
        kv_cache_manager_.uncache_blocks(*victim, victim->num_computed_tokens);
      }
      preempt(victim);
      preempted.push_back(victim);
      if (victim == req) {
        preempted_self = true;
        break;
      }
    }
    // running_[i] is now the next request: it may still fit without new blocks.
    if (preempted_self) continue;
    scheduled.push_back({req, n, ScheduledKind::kRunning, std::move(*blocks)});
    token_budget -= n;
    ++i;
  }
}

void Scheduler::schedule_waiting(std::vector<Entry>& scheduled, int& token_budget) {
  while (!waiting_.empty() && token_budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    Request* req = waiting_.peek();
    // Preempted requests come back with num_computed_tokens 0 and look up the cache again.
    auto [hit, num_computed] = kv_cache_manager_.get_computed_blocks(*req);
    int n = req->num_tokens() - num_computed;
    if (config_.long_prefill_token_threshold > 0)
      n = std::min(n, config_.long_prefill_token_threshold);
    // Without chunked prefill a request waits for a step with room for all of it (FCFS: the
    // queue waits with it).
    if (!config_.enable_chunked_prefill && n > token_budget) break;
    n = std::min(n, token_budget);
    if (!kv_cache_manager_.allocate_slots(*req, n, num_computed, hit)) break;
    waiting_.pop();
    running_.push_back(req);
    const ScheduledKind kind =
        req->status == RequestStatus::kPreempted ? ScheduledKind::kResumed : ScheduledKind::kNew;
    req->status = RequestStatus::kRunning;
    req->num_computed_tokens = num_computed;
    if (req->num_cached_tokens < 0) req->num_cached_tokens = num_computed;
    scheduled.push_back({req, n, kind, {}});
    token_budget -= n;
  }
}

SchedulerOutput Scheduler::schedule() {
  std::vector<Entry> scheduled;
  std::vector<Request*> preempted;
  int token_budget = config_.max_num_batched_tokens;
  schedule_running(scheduled, preempted, token_budget);
  // After a preemption the pool is tight: admitting new requests would only thrash.
  if (preempted.empty()) schedule_waiting(scheduled, token_budget);

  SchedulerOutput out;
  out.finished_req_ids = std::move(finished_req_ids_);
  finished_req_ids_.clear();
  for (Request* r : preempted) out.preempted_req_ids.push_back(r->request_id());
  in_flight_.clear();
  for (Entry& e : scheduled) {
    Request& r = *e.request;
    ScheduledRequest s;
    s.request_id = r.request_id();
    s.kind = e.kind;
    s.num_computed_tokens = r.num_computed_tokens;
    s.num_scheduled_tokens = e.num_new_tokens;
    auto tokens = r.all_token_ids().subspan(r.num_computed_tokens, e.num_new_tokens);
    s.token_ids.assign(tokens.begin(), tokens.end());
    if (e.kind == ScheduledKind::kRunning)
      s.new_block_ids = std::move(e.new_blocks.block_ids);
    else
      s.block_ids = kv_cache_manager_.get_block_ids(r.request_id());
    if (kv_cache_manager_.has_sliding_window()) {
      auto nulls = kv_cache_manager_.num_null_blocks(r.request_id());
      s.num_null_blocks.assign(nulls.begin(), nulls.end());
    }
    // The KV of these tokens is written by this step (vLLM's _update_after_schedule).
    r.num_computed_tokens += e.num_new_tokens;
    s.sample = r.num_computed_tokens == r.num_tokens();
    out.total_num_scheduled_tokens += e.num_new_tokens;
    in_flight_.emplace_back(r.request_id(), s.num_computed_tokens);
    out.scheduled.push_back(std::move(s));
  }
  return out;
}

bool Scheduler::check_stop(Request& r) const {
  const bool at_model_len = r.num_tokens() >= config_.max_model_len;
  if (r.num_output_tokens() < r.min_tokens && !at_model_len) return false;
  const int last = r.output_token_ids().back();
  if (r.num_output_tokens() >= r.min_tokens) {
    if (!r.ignore_eos && contains(r.eos_token_ids, last)) {
      r.status = RequestStatus::kFinishedStopped;
      return true;
    }
    if (contains(r.stop_token_ids, last)) {
      r.status = RequestStatus::kFinishedStopped;
      r.stop_token_id = last;
      return true;
    }
  }
  if (at_model_len || r.num_output_tokens() >= r.max_tokens) {
    r.status = RequestStatus::kFinishedLength;
    return true;
  }
  return false;
}

UpdateResult Scheduler::update_from_output(
    const std::unordered_map<std::string, std::vector<int>>& sampled_token_ids) {
  UpdateResult result;
  const auto in_flight = std::move(in_flight_);
  in_flight_.clear();
  for (const auto& entry : in_flight) {
    const std::string& id = entry.first;
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;  // aborted since schedule()
    Request* req = it->second.get();
    if (req->status != RequestStatus::kRunning) continue;
    // A prefill chunk short of the last token samples nothing.
    if (req->num_computed_tokens < req->num_tokens()) continue;
    auto s = sampled_token_ids.find(id);
    if (s == sampled_token_ids.end() || s->second.empty()) continue;
    RequestUpdate u;
    u.request_id = id;
    for (int t : s->second) {
      req->append_output_token_id(t);
      u.new_token_ids.push_back(t);
      if (check_stop(*req)) break;
    }
    u.status = req->status;
    u.stop_token_id = req->stop_token_id;
    u.num_cached_tokens = std::max(req->num_cached_tokens, 0);
    result.outputs.push_back(std::move(u));
    if (is_finished(req->status)) {
      result.finished.push_back({id, req->status});
      finish(req, req->status);
    }
  }
  return result;
}

void Scheduler::finish(Request* request, RequestStatus status) {
  const std::string id = request->request_id();  // outlives *request
  // Finished between schedule() and update_from_output(): that step may never run, so the
  // blocks cached for it must not be hit.
  for (const auto& [fid, start] : in_flight_)
    if (fid == id) kv_cache_manager_.uncache_blocks(*request, start);
  if (auto it = std::find(running_.begin(), running_.end(), request); it != running_.end())
    running_.erase(it);
  else
    waiting_.remove(request);
  kv_cache_manager_.free(id);
  request->status = status;
  finished_req_ids_.push_back(id);
  requests_.erase(id);
}

bool Scheduler::abort_request(const std::string& request_id) {
  return finish_request(request_id, RequestStatus::kFinishedAborted);
}

bool Scheduler::finish_request(const std::string& request_id, RequestStatus status) {
  VLLM_CHECK(is_finished(status), "finish_request needs a finished status, got ",
             to_string(status));
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return false;
  finish(it->second.get(), status);
  return true;
}

const Request* Scheduler::get_request(const std::string& request_id) const {
  auto it = requests_.find(request_id);
  return it == requests_.end() ? nullptr : it->second.get();
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.num_running = num_running();
  s.num_waiting = num_waiting();
  s.kv_cache_usage = kv_cache_manager_.usage();
  s.prefix_cache_queries = kv_cache_manager_.prefix_cache_queries();
  s.prefix_cache_hits = kv_cache_manager_.prefix_cache_hits();
  s.num_preemptions = num_preemptions_;
  return s;
}

}  // namespace vllm::core
