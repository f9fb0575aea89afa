// NodeGroup: the nodes of a tensor-parallel group meet on 127.0.0.1 (each node a thread here,
// a process or host in use), agree on their settings and join their CPU collectives.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <future>
#include <thread>

#include "runtime/node_group.h"

using namespace vllm;

namespace {

int free_port() {
  net::Socket s = net::listen_tcp("127.0.0.1", 0);
  sockaddr_in a{};
  socklen_t n = sizeof a;
  getsockname(s.fd(), reinterpret_cast<sockaddr*>(&a), &n);
  return ntohs(a.sin_port);
}

NodeGroupConfig node(int rank, int nnodes, int port) {
  NodeGroupConfig c;
  c.nnodes = nnodes;
  c.node_rank = rank;
  c.master_port = port;
  c.timeout_s = 30;
  return c;
}

const NodeSettings kSettings = {{"--dtype", "auto"}, {"--kv-cache-dtype", "auto"}};

}  // namespace

// Two nodes of two ranks each (node 0's second rank reaches rank 0 over the socket too): every
// rank gets its place, the names say which ranks a node holds, and an all-reduce over the four
// ranks gives each the sum of all four in rank order.
TEST(NodeGroup, NodesMeetAndTheirRanksReduceTogether) {
  const int port = free_port();
  std::vector<std::vector<float>> got(4);
  const auto run = [&](int rank) {
    NodeGroup g(node(rank, 2, port), 4, kSettings);
    EXPECT_EQ(g.head(), rank == 0);
    EXPECT_EQ(g.ranks_per_node(), 2);
    EXPECT_EQ(g.first_rank(), 2 * rank);
    EXPECT_EQ(g.node_name(1), "node 1 (ranks 2-3)");
    EXPECT_EQ(g.peers().size(), 1u);
    auto comms = g.communicators({});
    EXPECT_EQ(comms.size(), 2u);
    std::vector<std::thread> ranks;
    for (int j = 0; j < 2; ++j)
      ranks.emplace_back([&, j] {
        Communicator& c = *comms[size_t(j)];
        EXPECT_EQ(c.rank(), 2 * rank + j);
        EXPECT_EQ(c.size(), 4);
        Tensor x = Tensor::empty({3}, DType::F32);
        for (int i = 0; i < 3; ++i) x.data<float>()[i] = float(c.rank() * 10 + i);
        c.all_reduce_sum(x);
        got[size_t(c.rank())].assign(x.data<float>(), x.data<float>() + 3);
      });
    for (auto& t : ranks) t.join();
  };
  auto other = std::async(std::launch::async, run, 1);
  run(0);
  other.get();
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(got[size_t(r)], (std::vector<float>{60, 64, 68})) << "rank " << r;
}

// A node whose settings differ is refused: both ends fail, naming the setting and both values.
TEST(NodeGroup, ANodeWithOtherSettingsIsRefusedNamingTheSetting) {
  const int port = free_port();
  NodeSettings other = kSettings;
  other[1].second = "fp8";
  auto joining = std::async(std::launch::async, [&] {
    try {
      NodeGroup g(node(1, 2, port), 2, other);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("joined");
  });
  try {
    NodeGroup g(node(0, 2, port), 2, kSettings);
    FAIL() << "node 0 accepted a node with another --kv-cache-dtype";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-cache-dtype differs: node 1 has fp8, node 0 has "
                                         "auto"),
              std::string::npos)
        << e.what();
  }
  const std::string refused = joining.get();
  EXPECT_NE(refused.find("refused this node: --kv-cache-dtype differs"), std::string::npos)
      << refused;
}

// Sizes that cannot form a group are start-up errors naming the flags.
TEST(NodeGroup, SizesThatDoNotSplitAreErrors) {
  const auto message = [](int rank, int nnodes, int tp) {
    try {
      NodeGroup g(node(rank, nnodes, 1), tp, kSettings);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("formed");
  };
  EXPECT_NE(message(0, 2, 3).find("--tensor-parallel-size 3 does not split evenly over --nnodes 2"),
            std::string::npos);
  EXPECT_NE(message(2, 2, 2).find("--node-rank 2 is not a node of --nnodes 2"),
            std::string::npos);
}
