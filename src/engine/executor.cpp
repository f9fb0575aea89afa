#include "engine/executor.h"

#include <algorithm>
#include <optional>

#include "engine/remote_ranks.h"
#include "runtime/backend.h"
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

Executor::Executor(std::vector<const DecoderModel*> ranks, int num_blocks, int block_size,
                   RemoteRanks* remote)
    : remote_(remote) {
  VLLM_CHECK(!ranks.empty(), "an executor needs a model");
  for (const DecoderModel* m : ranks) {
    backend_for(m->device()).make_current();  // the rank's KV cache goes to its GPU
    devices_.push_back(m->device());
    if (m->communicator()) comms_.push_back(m->communicator());
    runners_.push_back(std::make_unique<ModelRunner>(*m, num_blocks, block_size));
  }
  if (remote_) remote_->start(num_blocks, block_size);
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
      backend_for(devices_[size_t(rank)]).make_current();
      runners_[size_t(rank)]->execute(*input);
    } catch (...) {
      error = failed(rank);
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
  if (remote_) remote_->add_request(id, request);
}

void Executor::remove_request(const std::string& id) {
  for (auto& r : runners_) r->remove_request(id);
  if (remote_) remote_->remove_request(id);
}

std::unordered_map<std::string, StepSample> Executor::execute(
    const core::SchedulerOutput& out, const std::function<bool()>& cancelled) {
  // The engine thread is not the one that loaded the model: with the model on cuda:1, or with
  // several GPUs, its current device has to be set.
  backend_for(devices_[0]).make_current();
  if (comms_.empty()) return runners_[0]->execute(out, cancelled);
  if (group_error_) std::rethrow_exception(group_error_);
  if (remote_) remote_->begin_step(out);
  for (auto& w : workers_) {
    {
      std::lock_guard lock(w->mutex);
      w->input = &out;
      ++w->step;
    }
    w->cv.notify_all();
  }
  std::vector<std::exception_ptr> errors(runners_.size());
  std::unordered_map<std::string, StepSample> samples;
  {
    std::optional<ScopedCpuPool> scoped;
    if (pool_) scoped.emplace(*pool_);
    try {
      samples = runners_[0]->execute(out);
    } catch (...) {
      errors[0] = failed(0);
    }
  }
  for (size_t r = 1; r < runners_.size(); ++r) {
    Worker& w = *workers_[r - 1];
    std::unique_lock lock(w.mutex);
    w.cv.wait(lock, [&] { return w.done == w.step; });
    errors[r] = w.error;
  }
  if (remote_) errors.push_back(remote_->end_step());
  // The rank that failed, not the ranks its abort stopped; the group cannot run again.
  for (auto& e : errors)
    if (e && !is_collective_abort(e) && !group_error_) group_error_ = e;
  for (auto& e : errors)
    if (e && !group_error_) group_error_ = e;
  if (group_error_) std::rethrow_exception(group_error_);
  return samples;
}

// Called in a rank's catch block: the error, named by its rank. Any error but an abort ends the
// group, so that the ranks waiting for this one in a collective stop with CollectiveAborted.
std::exception_ptr Executor::failed(int rank) {
  std::exception_ptr e = std::current_exception();
  if (is_collective_abort(e)) return e;
  for (Communicator* c : comms_) c->abort();
  if (remote_) remote_->abort();
  // The rank in the whole group (this process may hold ranks of another node).
  if (!comms_.empty()) rank = comms_[size_t(rank)]->rank();
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return std::make_exception_ptr(
        Error("tensor-parallel rank " + std::to_string(rank) + " failed: " + x.what()));
  } catch (...) {
    return std::make_exception_ptr(
        Error("tensor-parallel rank " + std::to_string(rank) + " failed"));
  }
}

}  // namespace vllm
