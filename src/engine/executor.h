// Executor: runs each scheduler step on the model runner of every tensor-parallel rank (vLLM's
// executor -> workers). Rank 0 runs on the calling (engine) thread, every other rank on a
// worker thread of its own, each with its own CPU thread pool (and, on CUDA, its own GPU, made
// the thread's current device at every step), so the ranks meet only in their collectives.
// The ranks see whole logits (gathered) and the same seeds, so they sample the same tokens;
// rank 0's samples are the step's. With one rank it is that rank's runner. When the group spans
// processes, `remote` (engine/remote_ranks.h) hands the same calls to the other nodes' ranks.
#pragma once
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/model_runner.h"
#include "runtime/thread_pool.h"

namespace vllm {

class RemoteRanks;

class Executor {
 public:
  // `ranks`: this process's shards (rank 0 first on node 0), each with a communicator of the
  // whole group; `remote`: the other nodes' ranks, if any.
  Executor(std::vector<const DecoderModel*> ranks, int num_blocks, int block_size,
           RemoteRanks* remote = nullptr);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void add_request(const std::string& id, const RunnerRequest& request);
  void remove_request(const std::string& id);
  // `cancelled` (ModelRunner::execute) is asked with one rank only: ranks that stopped apart
  // would wait for each other in their collectives. When a rank throws, the group's
  // communicators are aborted (the other ranks stop instead of waiting for it) and this throws
  // "tensor-parallel rank R failed: ...", now and at every later step.
  std::unordered_map<std::string, StepSample> execute(const core::SchedulerOutput& out,
                                                      const std::function<bool()>& cancelled = {});
  const std::vector<int>& eos_ids() const { return runners_[0]->eos_ids(); }
  int tensor_parallel_size() const { return static_cast<int>(runners_.size()); }

 private:
  struct Worker;
  void work(Worker& w, int rank);
  std::exception_ptr failed(int rank);

  std::vector<std::unique_ptr<ModelRunner>> runners_;
  std::vector<Device> devices_;  // each rank's
  std::vector<Communicator*> comms_;  // each rank's, with more than one rank
  std::unique_ptr<ThreadPool> pool_;  // rank 0's, with more than one rank
  std::vector<std::unique_ptr<Worker>> workers_;  // ranks 1..
  RemoteRanks* remote_ = nullptr;
  std::exception_ptr group_error_;  // a rank failed: the group is aborted for good
};

}  // namespace vllm
