// Runs a pooling model (model/pooling_model.h) off the HTTP threads: one worker thread takes queued requests in
// arrival order, packs the sequences of as many as fit a token budget into one forward (so
// concurrent requests share a batch), and fulfils each request's future. A request larger
// than the budget runs over several forwards; results never depend on the batch.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "model/pooling_model.h"

namespace vllm {

struct PoolingEngineConfig {
  int64_t max_batch_tokens = 8192;  // tokens of one forward (a longer sequence runs alone)
  size_t max_queued_requests = 1024;
};

class PoolingEngine {
 public:
  using Vectors = std::vector<std::vector<float>>;

  PoolingEngine(const PoolingModel& model, PoolingEngineConfig config);
  ~PoolingEngine();  // stops the worker; requests still queued fail with vllm::Error
  PoolingEngine(const PoolingEngine&) = delete;
  PoolingEngine& operator=(const PoolingEngine&) = delete;

  // Queues one request: its sequences (valid for the model: see PoolingModel::embed) and whether
  // to L2-normalise the pooled vectors. nullopt when the queue is full (the caller answers
  // 503); else a future of one vector per sequence, in order.
  std::optional<std::future<Vectors>> submit(std::vector<std::vector<int32_t>> seqs,
                                             bool normalize);

  const PoolingModel& model() const { return model_; }
  size_t num_unfinished() const;  // requests queued or running

 private:
  struct Job {
    std::vector<std::vector<int32_t>> seqs;
    bool normalize = true;
    size_t next = 0;  // first sequence not yet taken by the worker
    Vectors out;
    std::exception_ptr error;
    std::promise<Vectors> done;
  };
  void run();

  const PoolingModel& model_;
  PoolingEngineConfig config_;
  mutable std::mutex mutex_;  // guards queue_ and stop_
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Job>> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace vllm
