#include "runtime/node_group.h"

#include <chrono>
#include <tuple>

#include "util/check.h"

namespace vllm {
namespace {

// The group's own messages; the engine's (engine/remote_ranks.cpp) are numbered from 16.
enum Tag : uint32_t { kHello = 1, kWelcome = 2, kRefused = 3, kNcclId = 4 };
enum Kind : uint8_t { kControl = 0, kCollective = 1 };

struct Hello {
  uint8_t kind = kControl;
  int32_t rank = 0;  // control: the node; collective: the tensor-parallel rank
  int32_t nnodes = 0, tp = 0;
  NodeSettings settings;
};

std::string encode(const Hello& h) {
  net::Writer w;
  w.put(h.kind).put(h.rank).put(h.nnodes).put(h.tp).put<uint64_t>(h.settings.size());
  for (const auto& [k, v] : h.settings) w.put(std::string_view(k)).put(std::string_view(v));
  return w.str();
}

Hello decode_hello(const net::Message& m) {
  VLLM_CHECK(m.tag == kHello, "a connection that is not a vllm-cpp node (message ", m.tag, ")");
  net::Reader r(m.payload);
  Hello h;
  h.kind = r.get<uint8_t>();
  h.rank = r.get<int32_t>();
  h.nnodes = r.get<int32_t>();
  h.tp = r.get<int32_t>();
  const uint64_t n = r.get<uint64_t>();
  VLLM_CHECK(n < 4096, "a hello with ", n, " settings");
  for (uint64_t i = 0; i < n; ++i) {
    std::string k = r.get_string();
    h.settings.emplace_back(std::move(k), r.get_string());
  }
  return h;
}

using Clock = std::chrono::steady_clock;

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}

double seconds_left(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

// "--dtype differs: node 2 has float16, node 0 has bfloat16", for the first setting of node 0's
// that `theirs` does not share.
std::string first_difference(const NodeSettings& ours, const NodeSettings& theirs, int node) {
  for (const auto& [key, value] : ours) {
    std::string other = "(unset)";
    for (const auto& [k, v] : theirs)
      if (k == key) other = v;
    if (other != value)
      return key + " differs: node " + std::to_string(node) + " has " + other + ", node 0 has " +
             value;
  }
  return "node " + std::to_string(node) + " states settings node 0 does not have";
}

// The next connection on `listener` that introduces itself as a node or rank of ours, and its
// hello; connections that say nothing within 10 s or something else are dropped (a port
// scanner must not end the group). Throws Error at the deadline.
std::pair<net::Socket, Hello> accept_hello(const net::Socket& listener, Clock::time_point deadline) {
  for (;;) {
    net::Socket s = net::accept_tcp(listener, seconds_left(deadline));
    try {
      s.set_receive_timeout(10);
      Hello h = decode_hello(net::recv_message(s, 1 << 20));
      s.set_receive_timeout(0);
      return {std::move(s), std::move(h)};
    } catch (const Error&) {
    }
  }
}

}  // namespace

Peer::Peer(net::Socket socket, std::string name)
    : socket_(std::move(socket)), name_(std::move(name)), reader_([this] { read_loop(); }) {}

Peer::~Peer() {
  socket_.shutdown();
  reader_.join();
}

void Peer::set_watch(std::function<void(const net::Message*)> watch) {
  std::lock_guard lock(watch_mutex_);  // waits for a call in progress
  watch_ = std::move(watch);
}

void Peer::notify(const net::Message* m) {
  std::lock_guard lock(watch_mutex_);
  if (watch_) watch_(m);
}

void Peer::read_loop() {
  for (;;) {
    net::Message m;
    std::string why;
    try {
      m = net::recv_message(socket_);
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!why.empty()) {
      {
        std::lock_guard lock(mutex_);
        closed_ = why;
      }
      cv_.notify_all();
      notify(nullptr);
      return;
    }
    notify(&m);
    {
      std::lock_guard lock(mutex_);
      inbox_.push_back(std::move(m));
    }
    cv_.notify_all();
  }
}

void Peer::send(uint32_t tag, std::string_view payload) {
  std::lock_guard lock(send_mutex_);
  try {
    net::send_message(socket_, tag, payload);
  } catch (const net::ConnectionClosed& e) {
    throw net::ConnectionClosed(name_ + " is gone (" + e.what() + ")");
  }
}

net::Message Peer::receive() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return !inbox_.empty() || !closed_.empty(); });
  if (inbox_.empty()) throw Error(name_ + " is gone (" + closed_ + ")");
  net::Message m = std::move(inbox_.front());
  inbox_.pop_front();
  return m;
}

net::Message Peer::receive(uint32_t tag) {
  net::Message m = receive();
  VLLM_CHECK(m.tag == tag, name_, " sent message ", m.tag, " where ", tag, " was due");
  return m;
}

NodeGroup::NodeGroup(const NodeGroupConfig& config, int tensor_parallel_size,
                     const NodeSettings& settings)
    : config_(config), tp_(tensor_parallel_size) {
  const int n = config_.nnodes;
  if (n < 1) throw Error("--nnodes must be at least 1, got " + std::to_string(n));
  if (config_.node_rank < 0 || config_.node_rank >= n)
    throw Error("--node-rank " + std::to_string(config_.node_rank) + " is not a node of --nnodes " +
                std::to_string(n));
  if (tp_ % n != 0)
    throw Error("--tensor-parallel-size " + std::to_string(tp_) + " does not split evenly over " +
                "--nnodes " + std::to_string(n));
  if (n == 1) return;
  const auto deadline = after(config_.timeout_s);
  const std::string where = config_.master_addr + ":" + std::to_string(config_.master_port);
  if (!head()) {
    net::Socket s = net::connect_tcp(config_.master_addr, config_.master_port, config_.timeout_s);
    net::send_message(s, kHello, encode({kControl, config_.node_rank, n, tp_, settings}));
    const net::Message m = net::recv_message(s, 1 << 20);
    if (m.tag == kRefused) throw Error("node 0 (" + where + ") refused this node: " + m.payload);
    VLLM_CHECK(m.tag == kWelcome, "node 0 (", where, ") answered message ", m.tag);
    peers_.push_back(std::make_unique<Peer>(std::move(s), node_name(0)));
    return;
  }
  listener_ = net::listen_tcp(config_.master_addr, config_.master_port);
  std::vector<net::Socket> nodes(size_t(n - 1));
  for (int joined = 0; joined < n - 1;) {
    net::Socket s;
    Hello h;
    try {
      std::tie(s, h) = accept_hello(listener_, deadline);
    } catch (const Error&) {
      std::string missing;
      for (int k = 1; k < n; ++k)
        if (!nodes[size_t(k - 1)].valid()) missing += (missing.empty() ? "" : ", ") + node_name(k);
      throw Error("waited " + std::to_string(int(config_.timeout_s)) + " s on " + where +
                  " for the other nodes; missing: " + missing);
    }
    std::string refused;
    if (h.kind != kControl) refused = "a rank's connection before its node joined";
    else if (h.nnodes != n || h.tp != tp_)
      refused = "it has --nnodes " + std::to_string(h.nnodes) + " --tensor-parallel-size " +
                std::to_string(h.tp) + ", node 0 has --nnodes " + std::to_string(n) +
                " --tensor-parallel-size " + std::to_string(tp_);
    else if (h.rank < 1 || h.rank >= n) refused = "--node-rank " + std::to_string(h.rank) +
                                                  " is not 1 to " + std::to_string(n - 1);
    else if (nodes[size_t(h.rank - 1)].valid())
      refused = "another node already has --node-rank " + std::to_string(h.rank);
    else if (h.settings != settings)
      refused = first_difference(settings, h.settings, h.rank);
    if (!refused.empty()) {
      try {
        net::send_message(s, kRefused, refused);
      } catch (const std::exception&) {
      }
      throw Error("a node joining on " + where + " was refused: " + refused);
    }
    nodes[size_t(h.rank - 1)] = std::move(s);
    ++joined;
  }
  for (int k = 1; k < n; ++k) {
    net::send_message(nodes[size_t(k - 1)], kWelcome, {});
    peers_.push_back(std::make_unique<Peer>(std::move(nodes[size_t(k - 1)]), node_name(k)));
  }
}

NodeGroup::~NodeGroup() = default;

std::string NodeGroup::node_name(int node) const {
  const int l = ranks_per_node(), first = node * l;
  return "node " + std::to_string(node) +
         (l == 1 ? " (rank " + std::to_string(first) + ")"
                 : " (ranks " + std::to_string(first) + "-" + std::to_string(first + l - 1) + ")");
}

std::vector<std::shared_ptr<Communicator>> NodeGroup::communicators(const std::vector<int>& gpus) {
  const int local = ranks_per_node();
  if (!gpus.empty()) {
    VLLM_CHECK(int(gpus.size()) == local, "node ", node_rank(), " has ", local, " ranks, given ",
               gpus.size(), " GPUs");
    std::string id;
    if (head()) {
      id = nccl_unique_id();
      for (auto& p : peers_) p->send(kNcclId, id);
    } else {
      id = peers_[0]->receive(kNcclId).payload;
    }
    return make_nccl_communicators(gpus, first_rank(), tp_, id);
  }
  // Sockets around rank 0 (node 0's first rank); the other ranks of node 0 connect to it too.
  std::vector<std::shared_ptr<Communicator>> out;
  const auto join = [&](int rank) {
    net::Socket s = net::connect_tcp(config_.master_addr, config_.master_port, config_.timeout_s);
    net::send_message(s, kHello, encode({kCollective, rank, nnodes(), tp_, {}}));
    return s;
  };
  if (!head()) {
    for (int j = 0; j < local; ++j) {
      std::vector<net::Socket> one;
      one.push_back(join(first_rank() + j));
      out.push_back(make_socket_communicator(first_rank() + j, tp_, std::move(one)));
    }
    return out;
  }
  std::vector<net::Socket> own;  // node 0's ranks 1..local-1, to rank 0
  for (int j = 1; j < local; ++j) own.push_back(join(j));
  std::vector<net::Socket> hub(size_t(tp_ - 1));
  const auto deadline = after(config_.timeout_s);
  for (int joined = 0; joined < tp_ - 1; ++joined) {
    auto [s, h] = accept_hello(listener_, deadline);
    VLLM_CHECK(h.kind == kCollective && h.rank >= 1 && h.rank < tp_ &&
                   !hub[size_t(h.rank - 1)].valid(),
               "a collective connection for rank ", h.rank, " of ", tp_, " (kind ", int(h.kind),
               ")");
    hub[size_t(h.rank - 1)] = std::move(s);
  }
  out.push_back(make_socket_communicator(0, tp_, std::move(hub)));
  for (int j = 1; j < local; ++j) {
    std::vector<net::Socket> one;
    one.push_back(std::move(own[size_t(j - 1)]));
    out.push_back(make_socket_communicator(j, tp_, std::move(one)));
  }
  return out;
}

}  // namespace vllm
