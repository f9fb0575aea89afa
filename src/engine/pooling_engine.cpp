// PoolingEngine: the worker loop. The queue is only touched under the mutex; a job's sequences
// and results are touched by the worker alone once queued.
#include "engine/pooling_engine.h"

#include "util/check.h"

namespace vllm {

PoolingEngine::PoolingEngine(const PoolingModel& model, PoolingEngineConfig config)
    : model_(model), config_(config), worker_([this] { run(); }) {}

PoolingEngine::~PoolingEngine() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  worker_.join();
  for (auto& job : queue_)
    job->done.set_exception(std::make_exception_ptr(Error("the embedding engine stopped")));
}

std::optional<std::future<PoolingEngine::Vectors>> PoolingEngine::submit(
    std::vector<std::vector<int32_t>> seqs, bool normalize) {
  auto job = std::make_unique<Job>();
  job->seqs = std::move(seqs);
  job->normalize = normalize;
  job->out.resize(job->seqs.size());
  std::future<Vectors> result = job->done.get_future();
  {
    std::lock_guard lock(mutex_);
    if (queue_.size() >= config_.max_queued_requests) return std::nullopt;
    if (job->seqs.empty()) {
      job->done.set_value({});
      return result;
    }
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
  return result;
}

size_t PoolingEngine::num_unfinished() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

void PoolingEngine::run() {
  const int64_t hidden = model_.hidden_size();
  struct Slot {
    Job* job;
    size_t index;
  };
  for (;;) {
    // Sequences from the front jobs, in order, until the token budget is used (at least one).
    std::vector<Slot> slots;
    std::vector<std::vector<int32_t>> batch;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      int64_t tokens = 0;
      for (auto& job : queue_) {
        size_t i = job->next;
        for (; i < job->seqs.size(); ++i) {
          const auto len = static_cast<int64_t>(job->seqs[i].size());
          if (!batch.empty() && tokens + len > config_.max_batch_tokens) break;
          tokens += len;
          slots.push_back({job.get(), i});
          batch.push_back(std::move(job->seqs[i]));
        }
        job->next = i;
        if (i < job->seqs.size()) break;  // the rest of this job (and later jobs) wait
      }
    }
    std::exception_ptr error;
    std::vector<float> vectors;
    try {
      vectors = model_.embed(batch);
    } catch (...) {
      error = std::current_exception();
    }
    std::vector<std::unique_ptr<Job>> finished;
    {
      std::lock_guard lock(mutex_);
      for (size_t k = 0; k < slots.size(); ++k) {
        Job& job = *slots[k].job;
        if (error) {
          job.error = error;
          job.next = job.seqs.size();
          continue;
        }
        const float* v = vectors.data() + static_cast<int64_t>(k) * hidden;
        job.out[slots[k].index].assign(v, v + hidden);
      }
      // Jobs are taken in queue order, so they complete in queue order.
      while (!queue_.empty() && queue_.front()->next >= queue_.front()->seqs.size()) {
        finished.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    for (auto& job : finished) {
      if (job->error) {
        job->done.set_exception(job->error);
        continue;
      }
      if (job->normalize)
        for (auto& v : job->out) l2_normalize(v.data(), hidden);
      job->done.set_value(std::move(job->out));
    }
  }
}

}  // namespace vllm
