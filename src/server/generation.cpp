#include "server/generation.h"

#include <condition_variable>
#include <deque>
#include <mutex>

#include "server/serving.h"

namespace vllm::server {

using Clock = std::chrono::steady_clock;

struct Generation::Shared {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<TaggedOutput> queue;
};

namespace {

// Per-prompt latency bookkeeping for the metrics; touched only on the engine thread.
struct Timing {
  Clock::time_point arrival = Clock::now();
  std::vector<Clock::time_point> last_token;  // per completion index
  bool first_token_seen = false;
  int live = 0;
};

double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Generation::Generation(ServingContext& ctx, std::string base_id)
    : ctx_(ctx), base_id_(std::move(base_id)), shared_(std::make_shared<Shared>()) {
  ++ctx_.in_flight;
}

Generation::~Generation() {
  abort();
  --ctx_.in_flight;
}

void Generation::add(std::vector<int32_t> prompt, const SamplingParams& params, int priority) {
  const int prompt_index = static_cast<int>(engine_ids_.size());
  const std::string id = base_id_ + "-" + std::to_string(prompt_index);
  auto timing = std::make_shared<Timing>();
  timing->last_token.resize(params.n);
  timing->live = params.n;
  Metrics* metrics = &ctx_.metrics;
  std::shared_ptr<Shared> shared = shared_;
  auto on_output = [shared, timing, metrics, prompt_index](const RequestOutput& out) {
    const auto now = Clock::now();
    if (!out.new_token_ids.empty()) {
      if (!timing->first_token_seen) {
        timing->first_token_seen = true;
        metrics->observe_ttft(secs(now - timing->arrival));
        metrics->add_prompt_tokens(out.num_prompt_tokens);
      }
      auto& last = timing->last_token.at(out.index);
      if (last != Clock::time_point{}) metrics->observe_inter_token(secs(now - last));
      last = now;
      metrics->add_generation_tokens(static_cast<int>(out.new_token_ids.size()));
    }
    if (out.finished) {
      metrics->count_finished(out.finish_reason);
      if (--timing->live == 0) metrics->observe_e2e(secs(now - timing->arrival));
    }
    {
      std::lock_guard lock(shared->mutex);
      shared->queue.push_back({prompt_index, out});
    }
    shared->ready.notify_all();
  };
  ctx_.engine->add_request(id, std::move(prompt), params, std::move(on_output), priority);
  engine_ids_.push_back(id);
  total_completions_ += params.n;
}

std::vector<TaggedOutput> Generation::next(std::chrono::milliseconds timeout) {
  if (ctx_.abort_all && !aborted_) abort();
  std::vector<TaggedOutput> outs;
  {
    std::unique_lock lock(shared_->mutex);
    shared_->ready.wait_for(lock, timeout, [&] { return !shared_->queue.empty(); });
    outs.assign(std::make_move_iterator(shared_->queue.begin()),
                std::make_move_iterator(shared_->queue.end()));
    shared_->queue.clear();
  }
  for (const auto& o : outs)
    if (o.out.finished) ++consumed_finished_;
  return outs;
}

void Generation::abort() {
  if (aborted_ || done()) return;
  aborted_ = true;
  // Finished requests are unknown to the engine by now: abort() is then a no-op.
  for (const std::string& id : engine_ids_) ctx_.engine->abort(id);
}

}  // namespace vllm::server
