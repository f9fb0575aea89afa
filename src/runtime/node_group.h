// The nodes of a tensor-parallel group that spans processes (hosts), named as torchrun names
// them: --nnodes, --node-rank, --master-addr, --master-port. The ranks are spread evenly, node
// k holding ranks k * L .. k * L + L - 1 (L = tensor_parallel_size / nnodes). Node 0 (the
// head) listens on master-addr:master-port; the others connect there. Over those connections
// the group agrees (every node states the settings the shards and the cache depend on; a node
// whose settings differ is refused, naming them), then joins its collectives: over NCCL on
// CUDA (the head makes the id and sends it), over sockets around rank 0 on the CPU. The
// connections then carry the engine's control messages (engine/remote_ranks.h).
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/communicator.h"
#include "util/net.h"

namespace vllm {

struct NodeGroupConfig {
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double timeout_s = 600;  // node 0 waits this long for the others, they as long for it
};

// Name and value of each setting the nodes must agree on.
using NodeSettings = std::vector<std::pair<std::string, std::string>>;

// A connection to another node with a thread reading it: messages queue up for receive().
// `watch` (set_watch) sees each message on the reader thread as it arrives, and nullptr when
// the connection ends: there a node aborts collectives that wait for a peer that failed. Once
// set_watch returns, the previous watch is not running and will not run again.
class Peer {
 public:
  Peer(net::Socket socket, std::string name);
  ~Peer();
  const std::string& name() const { return name_; }
  void set_watch(std::function<void(const net::Message*)> watch);
  // Thread-safe. Throws net::ConnectionClosed when the peer is gone.
  void send(uint32_t tag, std::string_view payload = {});
  // The next message (tag checked when `tag` is given), or Error when the connection ended.
  net::Message receive();
  net::Message receive(uint32_t tag);

 private:
  void read_loop();
  void notify(const net::Message* m);

  net::Socket socket_;
  std::string name_;
  std::mutex send_mutex_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<net::Message> inbox_;
  std::mutex watch_mutex_;
  std::function<void(const net::Message*)> watch_;
  std::string closed_;  // why the connection ended; empty while open
  std::thread reader_;
};

class NodeGroup {
 public:
  // Meets the other nodes (node 0: waits for all of them; others: connect to node 0) and
  // checks their settings; throws Error naming a node that differs or does not come.
  NodeGroup(const NodeGroupConfig& config, int tensor_parallel_size, const NodeSettings& settings);
  ~NodeGroup();
  NodeGroup(const NodeGroup&) = delete;
  NodeGroup& operator=(const NodeGroup&) = delete;

  bool head() const { return config_.node_rank == 0; }
  int node_rank() const { return config_.node_rank; }
  int nnodes() const { return config_.nnodes; }
  int tensor_parallel_size() const { return tp_; }
  int ranks_per_node() const { return tp_ / config_.nnodes; }
  int first_rank() const { return config_.node_rank * ranks_per_node(); }
  // "node 1 (ranks 2-3)".
  std::string node_name(int node) const;
  // The communicators of this node's ranks, first_rank() first: over NCCL on `gpus` (one per
  // local rank), or over sockets when `gpus` is empty. Every node calls it once, at the same
  // point of loading.
  std::vector<std::shared_ptr<Communicator>> communicators(const std::vector<int>& gpus);
  // Node 0: the other nodes, peers()[k - 1] being node k. Another node: peers()[0] is node 0.
  std::vector<std::unique_ptr<Peer>>& peers() { return peers_; }

 private:
  NodeGroupConfig config_;
  int tp_;
  net::Socket listener_;  // node 0
  std::vector<std::unique_ptr<Peer>> peers_;
};

}  // namespace vllm
