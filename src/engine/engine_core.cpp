#include "engine/engine_core.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <thread>

#include "engine/remote_ranks.h"
#include "runtime/backend.h"
#include "runtime/device.h"
#include "tokenizer/stop_strings.h"
#include "util/check.h"

namespace vllm {

struct EngineCore::Completion {
  std::string parent_id;
  int index = 0;
  SamplingParams params;
  std::unique_ptr<IncrementalDetokenizer> detok;
  std::string text;      // all text so far, stop-string truncation applied
  size_t emitted = 0;    // bytes of `text` already returned
  size_t max_stop = 0;   // longest stop string
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;
  RequestTimes times;
  bool first_output = true;
  bool finished = false;
};

namespace {

void check_params(const SamplingParams& p, int vocab) {
  auto bad = [](const std::string& msg) { throw Error(msg); };
  if (p.n < 1) bad("n must be at least 1, got " + std::to_string(p.n));
  if (!(p.temperature >= 0.0f)) bad("temperature must be non-negative");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) bad("top_p must be in (0, 1]");
  if (p.top_k < -1) bad("top_k must be -1 (disable) or at least 1");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad("min_p must be in [0, 1]");
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f))
    bad("presence_penalty must be in [-2, 2]");
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f))
    bad("frequency_penalty must be in [-2, 2]");
  if (!(p.repetition_penalty > 0.0f)) bad("repetition_penalty must be positive");
  if (p.max_tokens < 1) bad("max_tokens must be at least 1");
  if (p.min_tokens < 0 || p.min_tokens > p.max_tokens)
    bad("min_tokens must be in [0, max_tokens]");
  if (p.logprobs && (*p.logprobs < 0 || *p.logprobs > 20)) bad("logprobs must be in [0, 20]");
  if (p.prompt_logprobs && (*p.prompt_logprobs < 0 || *p.prompt_logprobs > 20))
    bad("prompt_logprobs must be in [0, 20]");
  auto in_vocab = [&](int32_t t, const char* what) {
    if (t < 0 || t >= vocab)
      bad(std::string(what) + " token id " + std::to_string(t) + " outside the vocabulary");
  };
  for (int32_t t : p.stop_token_ids) in_vocab(t, "stop_token_ids");
  // vLLM's messages for these two name every id outside the vocabulary and its size.
  auto all_in_vocab = [&](const std::vector<int32_t>& ids, const std::string& what) {
    std::string bad;
    for (int32_t t : ids)
      if (t < 0 || t >= vocab) bad += (bad.empty() ? "" : ", ") + std::to_string(t);
    if (!bad.empty())
      throw Error("token_id(s) [" + bad + "] in " + what +
                  " contain out-of-vocab token ids. Vocabulary size: " + std::to_string(vocab));
  };
  all_in_vocab(p.allowed_token_ids, "allowed_token_ids");
  std::vector<int32_t> biased;
  for (const auto& [t, b] : p.logit_bias) biased.push_back(t);
  all_in_vocab(biased, "logit_bias");
  for (const auto& w : p.bad_words_ids)
    for (int32_t t : w) in_vocab(t, "bad_words");
  for (const auto& s : p.stop)
    if (s.empty()) bad("stop strings must not be empty");
}

core::KvCacheConfig kv_config(const DecoderModel& model, const EngineConfig& c) {
  core::KvCacheConfig kv;
  kv.block_size = c.block_size;
  kv.enable_prefix_caching = c.enable_prefix_caching;
  // One group per model group: windowed groups give back the blocks behind their window.
  kv.groups.clear();
  for (const KvCacheGroup& g : model.kv_cache_groups()) {
    core::KvCacheGroupSpec& s = kv.groups.emplace_back();
    const bool windowed = g.sliding_window > 0 && !c.disable_hybrid_kv_cache_manager;
    s.policy = windowed ? core::KvPolicy::kSlidingWindow : core::KvPolicy::kFull;
    s.sliding_window = windowed ? g.sliding_window : 0;
    s.num_layers = static_cast<int>(g.layers.size());
    s.layout.bytes_per_token = model.kv_bytes_per_layer_token();
    s.layout.row_width = s.layout.padded_row_width = model.config().kv_size();
  }
  kv.num_blocks = core::num_blocks_for_budget(c.kv_cache_memory, model.kv_bytes_per_token(),
                                              c.block_size);
  return kv;
}

core::SchedulerConfig scheduler_config(const EngineConfig& c) {
  core::SchedulerConfig s;
  s.max_num_seqs = c.max_num_seqs;
  s.max_num_batched_tokens = c.max_num_batched_tokens;
  s.max_model_len = c.max_model_len;
  s.policy = c.priority_policy ? core::SchedulingPolicy::kPriority : core::SchedulingPolicy::kFcfs;
  return s;
}

// Runs work(r) for every rank at once, rank 0 on the calling thread: their steps meet in
// collectives. A rank that throws aborts the group (the others stop waiting for it); its error
// is rethrown, not the aborts it caused.
void on_every_rank(const std::vector<const DecoderModel*>& ranks,
                   const std::function<void(size_t)>& work) {
  std::vector<std::exception_ptr> errors(ranks.size());
  const auto run = [&](size_t r) {
    try {
      work(r);
    } catch (...) {
      errors[r] = std::current_exception();
      for (const DecoderModel* m : ranks)
        if (m->communicator()) m->communicator()->abort();
    }
  };
  std::vector<std::thread> threads;
  for (size_t r = 1; r < ranks.size(); ++r) threads.emplace_back(run, r);
  run(0);
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e && !is_collective_abort(e)) std::rethrow_exception(e);
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// The config with max_model_len and, on a GPU, the KV budget filled in; `memory` receives a line
// on how the GPU budget was split. With other nodes, they profile their ranks at the same time
// and the tightest rank of all sets the budget.
EngineConfig resolved(EngineConfig c, const std::vector<const DecoderModel*>& ranks,
                      RemoteRanks* remote, std::string& memory) {
  const DecoderModel& model = *ranks.at(0);
  if (c.max_model_len <= 0) c.max_model_len = model.config().max_position_embeddings;
  if (model.device().kind == DeviceKind::Cuda && c.gpu_memory_utilization > 0) {
    if (remote) remote->begin_profile(c);
    KvBudget budget = profile_kv_budget(c, ranks);
    if (remote)
      for (KvBudget& b : remote->end_profile())
        if (b.bytes < budget.bytes) budget = std::move(b);
    memory = budget.memory;
    if (budget.bytes <= 0)
      throw Error("--gpu-memory-utilization " + std::to_string(c.gpu_memory_utilization) +
                  " leaves no room for a KV cache. " + memory);
    c.kv_cache_memory = budget.bytes;
    memory += "; the KV cache gets " + std::to_string(budget.bytes >> 20) + " MiB";
  }
  return c;
}

}  // namespace

KvBudget profile_kv_budget(const EngineConfig& c, const std::vector<const DecoderModel*>& ranks) {
  // vLLM's profile run: dummy steps at the token budget and at every decode-graph bucket
  // measure what a step takes; the KV cache gets the rest. The pool's rounding is not in the
  // measured peak, hence the tenth on top.
  std::vector<DecoderModel::StepMemory> steps(ranks.size());
  on_every_rank(ranks, [&](size_t r) {
    backend_for(ranks[r]->device()).make_current();
    steps[r] = ranks[r]->profile_step_memory(c.max_num_batched_tokens, 2 * c.max_num_seqs,
                                             c.max_model_len, c.block_size);
  });
  const auto mib = [](int64_t b) { return std::to_string(b >> 20) + " MiB"; };
  KvBudget budget;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const DecoderModel::StepMemory& step = steps[r];
    const DeviceInfo info = cuda_device_info(ranks[r]->device().index);
    const int64_t used = int64_t(info.total_bytes) - int64_t(info.free_bytes);
    const int64_t reserve = step.activation_bytes + step.activation_bytes / 10 +
                            step.graph_arena_bytes;
    const int64_t mine =
        static_cast<int64_t>(c.gpu_memory_utilization * double(info.total_bytes)) - used -
        reserve;
    if (r == 0 || mine < budget.bytes) {
      budget.bytes = mine;
      budget.memory =
          "GPU memory" +
          (ranks.size() > 1 ? " (" + ranks[r]->device().str() + ", the tightest rank)"
                            : std::string()) +
          ": " + mib(used) + " of " + mib(int64_t(info.total_bytes)) +
          " in use after loading; a step at " + std::to_string(c.max_num_batched_tokens) +
          " tokens peaked at " + mib(step.activation_bytes) + " of activations and the " +
          "decode graphs need an arena of " + mib(step.graph_arena_bytes) +
          " (both measured by dummy steps)";
    }
  }
  return budget;
}

EngineCore::EngineCore(const DecoderModel& model, const Tokenizer* tokenizer, EngineConfig config)
    : EngineCore(std::vector<const DecoderModel*>{&model}, tokenizer, std::move(config)) {}

EngineCore::EngineCore(std::vector<const DecoderModel*> ranks, const Tokenizer* tokenizer,
                       EngineConfig config, RemoteRanks* remote)
    : model_(*ranks.at(0)),
      tokenizer_(tokenizer),
      config_(resolved(config, ranks, remote, memory_summary_)),
      scheduler_(scheduler_config(config_), kv_config(model_, config_)),
      next_seed_(config_.seed) {
  runner_ = std::make_unique<Executor>(std::move(ranks),
                                       scheduler_.kv_cache_manager().config().num_blocks,
                                       config_.block_size, remote);
}

EngineCore::~EngineCore() = default;

void EngineCore::validate_request(const std::vector<int32_t>& prompt,
                                  const SamplingParams& params) const {
  check_params(params, model_.config().vocab_size);
  if (prompt.empty()) throw Error("the prompt is empty");
  for (int32_t t : prompt)
    if (t < 0 || t >= model_.config().vocab_size)
      throw Error("prompt token id " + std::to_string(t) + " outside the vocabulary");
  if (static_cast<int>(prompt.size()) >= config_.max_model_len)
    throw Error("the prompt has " + std::to_string(prompt.size()) +
                " tokens, but max_model_len is " + std::to_string(config_.max_model_len));
  if (!params.stop.empty() && !tokenizer_) throw Error("stop strings need a tokenizer");
  // vLLM's rule: max_tokens may not push the request past max_model_len.
  const int room = config_.max_model_len - static_cast<int>(prompt.size());
  if (params.max_tokens > room)
    throw Error("max_tokens (" + std::to_string(params.max_tokens) + ") + prompt (" +
                std::to_string(prompt.size()) + " tokens) exceeds max_model_len (" +
                std::to_string(config_.max_model_len) + ")");
}

void EngineCore::add_request(const std::string& id, std::vector<int32_t> prompt,
                             SamplingParams params, int priority, StatsClock::time_point arrival) {
  validate_request(prompt, params);
  if (parents_.count(id)) throw Error("duplicate request id " + id);
  const StatsClock::time_point now = StatsClock::now();
  Parent& parent = parents_[id];
  parent.n = params.n;
  std::vector<std::string>& children = parent.children;
  for (int i = 0; i < params.n; ++i) {
    const std::string child = params.n == 1 ? id : id + "#" + std::to_string(i);
    SamplingParams p = params;
    if (params.seed) p.seed = *params.seed + static_cast<uint64_t>(i);
    core::Request r(child, std::vector<int>(prompt.begin(), prompt.end()));
    r.max_tokens = p.max_tokens;
    r.min_tokens = p.min_tokens;
    r.ignore_eos = p.ignore_eos;
    r.skip_reading_prefix_cache = p.prompt_logprobs.has_value();
    r.eos_token_ids = runner_->eos_ids();
    r.stop_token_ids = std::vector<int>(p.stop_token_ids.begin(), p.stop_token_ids.end());
    r.priority = priority;
    scheduler_.add_request(std::move(r));
    runner_->add_request(child, RunnerRequest{p, prompt, next_seed_++ * 0x9e3779b97f4a7c15ULL + 1});

    auto c = std::make_unique<Completion>();
    c->parent_id = id;
    c->index = i;
    c->params = p;
    c->num_prompt_tokens = static_cast<int>(prompt.size());
    c->times.arrival = arrival == StatsClock::time_point{} ? now : arrival;
    c->times.queued = now;
    if (tokenizer_) {
      const size_t ctx = std::min<size_t>(prompt.size(), 8);
      c->detok = std::make_unique<IncrementalDetokenizer>(
          *tokenizer_, p.skip_special_tokens,
          std::span<const int32_t>(prompt).subspan(prompt.size() - ctx));
    }
    for (const auto& s : p.stop) c->max_stop = std::max(c->max_stop, s.size());
    children_.emplace(child, std::move(c));
    children.push_back(child);
  }
}

void EngineCore::finish_child(const std::string& child_id, const std::string& reason,
                              StatsClock::time_point now) {
  runner_->remove_request(child_id);
  auto it = children_.find(child_id);
  if (it == children_.end()) return;
  const Completion& c = *it->second;
  iteration_stats_.finished.push_back(finished_stats(c.times, reason, c.num_prompt_tokens,
                                                     c.num_cached_tokens, c.params.max_tokens, now));
  const std::string parent_id = c.parent_id;
  Parent& parent = parents_.at(parent_id);
  parent.max_generation_tokens = std::max(parent.max_generation_tokens, c.times.num_generation_tokens);
  children_.erase(it);
  auto& kids = parent.children;
  kids.erase(std::remove(kids.begin(), kids.end(), child_id), kids.end());
  if (kids.empty()) {
    iteration_stats_.n_params.push_back(parent.n);
    iteration_stats_.max_num_generation_tokens.push_back(parent.max_generation_tokens);
    parents_.erase(parent_id);
  }
}

std::vector<int> EngineCore::live_completions(const std::string& id) const {
  std::vector<int> out;
  auto it = parents_.find(id);
  if (it == parents_.end()) return out;
  for (const std::string& child : it->second.children) out.push_back(children_.at(child)->index);
  return out;
}

bool EngineCore::abort_request(const std::string& id) {
  auto it = parents_.find(id);
  if (it == parents_.end()) return false;
  const std::vector<std::string> kids = it->second.children;
  const StatsClock::time_point now = StatsClock::now();
  for (const std::string& child : kids) {
    Completion& c = *children_.at(child);
    RequestOutput out;
    out.request_id = c.parent_id;
    out.index = c.index;
    out.finished = true;
    out.finish_reason = "abort";
    out.num_prompt_tokens = c.num_prompt_tokens;
    pending_.push_back(std::move(out));
    scheduler_.abort_request(child);
    finish_child(child, "abort", now);
  }
  return true;
}

// Moves newly final text into out.text_delta, holding back a tail that could still grow into
// a stop string (never splitting a UTF-8 character).
void EngineCore::emit_text(Completion& c, RequestOutput& out, bool final) {
  const size_t end = final_text_end(c.text, c.emitted, c.max_stop, final);
  if (end > c.emitted) {
    out.text_delta = c.text.substr(c.emitted, end - c.emitted);
    c.emitted = end;
  }
}

void EngineCore::record_tokens(Completion& c, const core::RequestUpdate& u, int num_new,
                               StatsClock::time_point now) {
  auto secs = [](StatsClock::duration d) { return std::chrono::duration<double>(d).count(); };
  RequestTimes& t = c.times;
  IterationStats& it = iteration_stats_;
  if (t.first_token == StatsClock::time_point{}) {
    t.first_token = now;
    c.num_cached_tokens = u.num_cached_tokens;
    it.time_to_first_tokens.push_back(secs(now - t.arrival));
    it.num_prompt_tokens += c.num_prompt_tokens;
    it.num_cached_prompt_tokens += u.num_cached_tokens;
  } else {
    it.inter_token_latencies.push_back(secs(now - t.last_token));
  }
  t.last_token = now;
  t.num_generation_tokens += num_new;
  it.num_generation_tokens += num_new;
}

std::vector<RequestOutput> EngineCore::step(
    const std::function<bool(const std::string&)>& leaving) {
  std::vector<RequestOutput> outputs = std::move(pending_);
  pending_.clear();
  if (!scheduler_.has_unfinished()) return outputs;
  const core::SchedulerOutput sched = scheduler_.schedule();
  const StatsClock::time_point scheduled_at = StatsClock::now();
  for (const core::ScheduledRequest& r : sched.scheduled) {
    if (r.kind != core::ScheduledKind::kNew) continue;  // first scheduled: always new
    if (auto it = children_.find(r.request_id); it != children_.end())
      it->second->times.scheduled = scheduled_at;
  }
  for (const std::string& id : sched.preempted_req_ids)
    if (auto it = children_.find(id); it != children_.end()) ++it->second->times.num_preemptions;
  iteration_stats_.stepped = true;
  iteration_stats_.num_scheduled_tokens += sched.total_num_scheduled_tokens;
  // finished_req_ids reach the runner inside sched (their batch rows go); their runner state
  // went in finish_child already, and removing it by id here would drop a new request that
  // reuses the id.
  std::function<bool()> cancelled;
  if (leaving) {
    std::vector<std::string> parents;
    for (const core::ScheduledRequest& r : sched.scheduled)
      if (auto it = children_.find(r.request_id); it != children_.end())
        parents.push_back(it->second->parent_id);
    cancelled = [&leaving, parents = std::move(parents)] {
      return !parents.empty() && std::all_of(parents.begin(), parents.end(), leaving);
    };
  }
  std::unordered_map<std::string, StepSample> samples;
  try {
    samples = runner_->execute(sched, cancelled);
  } catch (const StepCancelled&) {
    return outputs;
  }
  const StatsClock::time_point now = StatsClock::now();  // the new tokens' time
  std::unordered_map<std::string, std::vector<int>> sampled;
  for (auto& [id, s] : samples) {
    if (s.error.empty()) {
      if (!s.token_ids.empty()) sampled[id] = s.token_ids;
      continue;
    }
    // The request cannot go on: it ends here, with no new token, and carries the message.
    auto it = children_.find(id);
    if (it == children_.end()) continue;
    const Completion& c = *it->second;
    RequestOutput out;
    out.request_id = c.parent_id;
    out.index = c.index;
    out.num_prompt_tokens = c.num_prompt_tokens;
    out.finished = true;
    out.finish_reason = core::finish_reason(core::RequestStatus::kFinishedError);
    out.error = std::move(s.error);
    outputs.push_back(std::move(out));
    scheduler_.finish_request(id, core::RequestStatus::kFinishedError);
    finish_child(id, outputs.back().finish_reason, now);
  }
  const core::UpdateResult update = scheduler_.update_from_output(sampled);

  std::unordered_map<std::string, core::RequestStatus> finished;
  for (const auto& f : update.finished) finished[f.request_id] = f.status;
  for (const core::RequestUpdate& u : update.outputs) {
    auto it = children_.find(u.request_id);
    if (it == children_.end()) continue;
    Completion& c = *it->second;
    RequestOutput out;
    out.request_id = c.parent_id;
    out.index = c.index;
    out.num_prompt_tokens = c.num_prompt_tokens;
    out.num_cached_tokens = u.num_cached_tokens;
    out.new_token_ids.assign(u.new_token_ids.begin(), u.new_token_ids.end());
    const StepSample& s = samples[u.request_id];
    if (c.params.logprobs && s.chosen) out.logprobs.push_back({*s.chosen, s.top});
    if (c.first_output && c.params.prompt_logprobs) {
      out.prompt_logprobs.push_back(std::nullopt);  // the first prompt token has none
      for (const auto& [lp, top] : s.prompt_logprobs) out.prompt_logprobs.push_back(StepLogprobs{lp, top});
    }
    c.first_output = false;
    if (!out.new_token_ids.empty())
      record_tokens(c, u, static_cast<int>(out.new_token_ids.size()), now);
    bool done = finished.count(u.request_id) > 0;
    core::RequestStatus status = done ? finished[u.request_id] : core::RequestStatus::kRunning;
    if (u.stop_token_id) out.stop_reason = std::to_string(*u.stop_token_id);
    if (c.detok) {
      // As vLLM's detokenizer: the token that stopped the completion (EOS or a stop token id)
      // is not text, unless include_stop_str_in_output (it only shows with
      // skip_special_tokens false).
      size_t n = out.new_token_ids.size();
      if (done && status == core::RequestStatus::kFinishedStopped && n > 0 &&
          !c.params.include_stop_str_in_output) {
        const int32_t last = out.new_token_ids.back();
        const auto& eos = runner_->eos_ids();
        if ((u.stop_token_id && *u.stop_token_id == last) ||
            (!c.params.ignore_eos && std::find(eos.begin(), eos.end(), last) != eos.end()))
          --n;
      }
      for (size_t i = 0; i < n; ++i) c.text += c.detok->push(out.new_token_ids[i]);
      if (done) c.text += c.detok->finish();
      // Stop strings: search only where a match could newly end.
      if (const std::string* stop = cut_at_stop_string(c.text, c.emitted, c.params.stop,
                                                       c.params.include_stop_str_in_output)) {
        out.stop_reason = *stop;
        if (!done) {
          scheduler_.finish_request(u.request_id, core::RequestStatus::kFinishedStopped);
          done = true;
        }
        status = core::RequestStatus::kFinishedStopped;
      }
      emit_text(c, out, done);
    }
    if (done) {
      out.finished = true;
      out.finish_reason = core::finish_reason(status);
      finish_child(u.request_id, out.finish_reason, now);
    }
    outputs.push_back(std::move(out));
  }
  return outputs;
}

}  // namespace vllm
