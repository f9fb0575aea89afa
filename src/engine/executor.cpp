#include "engine/executor.h"

#include <algorithm>

#include "util/check.h"

namespace vllm {

// A rank's worker thread and the step it is given: `step` counts the steps handed out, `done`
// the ones finished; the step's input stays with the caller, who waits for it.
struct Executor::Worker {
  std::mutex mutex;
  std::condition_variable cv;
  const core::SchedulerOutput* input = nullptr;
  uint64_t step = 0, done = 0;
  bool stop = false;
  std::exception_ptr error;
  std::thread thread;
};

Executor::Executor(std::vector<const DecoderModel*> ranks, int num_blocks, int block_size) {
  VLLM_CHECK(!ranks.empty(), "an executor needs a model");
  for (const DecoderModel* m : ranks)
    runners_.push_back(std::make_unique<ModelRunner>(*m, num_blocks, block_size));
  if (ranks.size() == 1) return;
  // The cores are shared out among the ranks; each rank's kernels run on its own pool.
  const int threads = std::max(1, cpu_pool().num_threads() / static_cast<int>(ranks.size()));
  pool_ = std::make_unique<ThreadPool>(threads);
  for (size_t r = 1; r < ranks.size(); ++r) {
    workers_.push_back(std::make_unique<Worker>());
    Worker& w = *workers_.back();
    w.thread = std::thread([this, &w, r, threads] {
      ThreadPool pool(threads);
      ScopedCpuPool scoped(pool);
      work(w, static_cast<int>(r));
    });
  }
}

Executor::~Executor() {
  for (auto& w : workers_) {
    {
      std::lock_guard lock(w->mutex);
      w->stop = true;
    }
    w->cv.notify_all();
    w->thread.join();
  }
}

void Executor::work(Worker& w, int rank) {
  uint64_t seen = 0;
  for (;;) {
    const core::SchedulerOutput* input;
    {
      std::unique_lock lock(w.mutex);
      w.cv.wait(lock, [&] { return w.stop || w.step != seen; });
      if (w.stop) return;
      seen = w.step;
      input = w.input;
    }
    std::exception_ptr error;
    try {
      runners_[size_t(rank)]->execute(*input);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(w.mutex);
      w.error = error;
      w.done = seen;
    }
    w.cv.notify_all();
  }
}

void Executor::add_request(const std::string& id, const RunnerRequest& request) {
  for (auto& r : runners_) r->add_request(id, request);
}

void Executor::remove_request(const std::string& id) {
  for (auto& r : runners_) r->remove_request(id);
}

std::unordered_map<std::string, StepSample> Executor::execute(const core::SchedulerOutput& out) {
  if (workers_.empty()) return runners_[0]->execute(out);
  for (auto& w : workers_) {
    {
      std::lock_guard lock(w->mutex);
      w->input = &out;
      ++w->step;
    }
    w->cv.notify_all();
  }
  std::exception_ptr error;
  std::unordered_map<std::string, StepSample> samples;
  {
    ScopedCpuPool scoped(*pool_);
    try {
      samples = runners_[0]->execute(out);
    } catch (...) {
      error = std::current_exception();
    }
  }
  for (auto& w : workers_) {
    std::unique_lock lock(w->mutex);
    w->cv.wait(lock, [&] { return w->done == w->step; });
    if (!error && w->error) error = w->error;
  }
  if (error) std::rethrow_exception(error);
  return samples;
}

}  // namespace vllm
