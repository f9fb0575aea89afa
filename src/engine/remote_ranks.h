// Tensor parallel across processes, the engine's half (runtime/node_group.h forms the group and
// its collectives). On node 0, RemoteRanks hands each call the executor makes on its runners to
// the other nodes, whose run_worker_node runs their ranks' shards on the same steps, meeting
// node 0's ranks in the collectives; only node 0 schedules and samples. A node that fails, or
// whose connection ends, ends the group: every node's collectives are aborted and the step
// throws, naming the node.
#pragma once
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "runtime/node_group.h"

namespace vllm {

class RemoteRanks {
 public:
  // `local`: node 0's own ranks, whose collectives a failing node aborts.
  RemoteRanks(NodeGroup& group, const std::vector<const DecoderModel*>& local);
  // Tells the other nodes the engine is done (they exit).
  ~RemoteRanks();
  RemoteRanks(const RemoteRanks&) = delete;
  RemoteRanks& operator=(const RemoteRanks&) = delete;

  // GPU start-up: the other nodes profile their ranks at once with node 0's (begin_profile
  // before node 0's own profile run, end_profile after it) and report their tightest budgets.
  void begin_profile(const EngineConfig& config);
  std::vector<KvBudget> end_profile();
  // The nodes allocate their caches.
  void start(int num_blocks, int block_size);
  void add_request(const std::string& id, const RunnerRequest& request);
  void remove_request(const std::string& id);
  // A step: sent before node 0 runs it; end_step waits for every node's outcome: null when all
  // ran it, else the error to report (a node's failure before its loss before an abort).
  void begin_step(const core::SchedulerOutput& out);
  std::exception_ptr end_step();
  // Node 0's ranks failed: the other nodes abort their collectives.
  void abort();
  // Why the group broke, from the moment a node reports a failure or its connection ends (also
  // between steps: the server polls it and shuts down); empty while the group holds.
  std::string failure() const;

 private:
  void broadcast(uint32_t tag, std::string_view payload = {});

  NodeGroup& group_;
  std::vector<Communicator*> local_;
  mutable std::mutex mutex_;
  std::string failure_;
};

// A node other than 0: runs its ranks (`ranks`, this node's shards) on the steps node 0 sends,
// until node 0 ends the engine. Returns the process's exit status: 0 when node 0 ended it
// cleanly, 1 when the group failed (the reason printed on stderr).
int run_worker_node(NodeGroup& group, const std::vector<const DecoderModel*>& ranks);

// What every node of a group must share (NodeGroup refuses a node that differs, naming the
// setting): the model (its config.json, or its GGUF file's size and header), the build, and the
// flags that shape the shards, the caches and the steps.
struct NodeFlags {
  std::string model_path;
  Device device;
  std::optional<DType> dtype;
  std::string quantization, kv_cache_dtype;
  bool enforce_eager = false;
  int max_model_len = 0;
};
NodeSettings node_settings(const NodeFlags& flags);

// The wire form of a step (exposed for tests).
std::string encode_step(const core::SchedulerOutput& out);
core::SchedulerOutput decode_step(const std::string& payload);

}  // namespace vllm
