// The collectives of the host communicators, each test run over both: ranks as threads of one
// process (make_thread_communicators), and ranks meeting over sockets as processes on different
// nodes do (make_socket_communicator, here over socket pairs between threads).
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/communicator.h"
#include "runtime/device.h"
#include "util/check.h"

using namespace vllm;

namespace {

enum class Kind { kThreads, kSockets };

// The communicators of `size` ranks (a socket group needs two ranks; one rank is a thread group).
std::vector<std::shared_ptr<Communicator>> make_group(Kind kind, int size) {
  if (kind == Kind::kThreads || size == 1) return make_thread_communicators(size);
  std::vector<std::shared_ptr<Communicator>> out(static_cast<size_t>(size));
  std::vector<net::Socket> hub;
  for (int r = 1; r < size; ++r) {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    hub.emplace_back(fds[0]);
    std::vector<net::Socket> one;
    one.emplace_back(fds[1]);
    out[size_t(r)] = make_socket_communicator(r, size, std::move(one));
  }
  out[0] = make_socket_communicator(0, size, std::move(hub));
  return out;
}

class Collectives : public testing::TestWithParam<Kind> {
 protected:
  // Runs fn(rank, communicator) on `size` threads at once.
  template <typename Fn>
  void on_ranks(int size, Fn fn) {
    auto comms = make_group(GetParam(), size);
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { fn(r, *comms[size_t(r)]); });
    for (auto& t : threads) t.join();
  }
};

}  // namespace

INSTANTIATE_TEST_SUITE_P(Communicator, Collectives, testing::Values(Kind::kThreads, Kind::kSockets),
                         [](const testing::TestParamInfo<Kind>& i) {
                           return i.param == Kind::kThreads ? "Threads" : "Sockets";
                         });

// Every rank ends with the same sum, added in rank order (0.1f + 1e8f + -1e8f differs by
// order: in rank order it is 0, any other order could keep the 0.1), over many calls in a row
// with changing sizes (the shared buffer is reused).
TEST_P(Collectives, AllReduceSumsInRankOrderOnEveryRank) {
  for (int size : {1, 2, 3, 4}) {
    std::vector<std::vector<float>> results(size_t(size) * 20);
    on_ranks(size, [&](int rank, Communicator& c) {
      EXPECT_EQ(c.rank(), rank);
      EXPECT_EQ(c.size(), size);
      for (int call = 0; call < 20; ++call) {
        const int64_t n = 1 + call * 7;
        Tensor x = Tensor::empty({n}, DType::F32);
        for (int64_t i = 0; i < n; ++i)
          x.data<float>()[i] = rank == 0 ? 0.1f * float(i) : rank == 1 ? 1e8f : rank == 2 ? -1e8f : 1.0f;
        c.all_reduce_sum(x);
        results[size_t(call * size + rank)].assign(x.data<float>(), x.data<float>() + n);
      }
    });
    for (int call = 0; call < 20; ++call) {
      const int64_t n = 1 + call * 7;
      for (int64_t i = 0; i < n; ++i) {
        float want = 0.1f * float(i);  // the same additions in rank order
        if (size > 1) want += 1e8f;
        if (size > 2) want += -1e8f;
        if (size > 3) want += 1.0f;
        for (int r = 0; r < size; ++r)
          ASSERT_EQ(results[size_t(call * size + r)][size_t(i)], want)
              << "size " << size << " call " << call << " rank " << r << " element " << i;
      }
    }
  }
}

// abort() from another rank releases a rank waiting in a collective, and the group stays
// ended: every later collective of any rank throws too.
TEST_P(Collectives, AbortReleasesAWaitingRankAndEndsTheGroup) {
  auto comms = make_group(GetParam(), 3);
  std::atomic<int> released{0};
  std::vector<std::thread> waiting;
  for (int r = 0; r < 2; ++r)
    waiting.emplace_back([&, r] {
      Tensor x = Tensor::empty({4}, DType::F32);
      std::fill_n(x.data<float>(), 4, 1.0f);
      EXPECT_THROW(comms[size_t(r)]->all_reduce_sum(x), CollectiveAborted) << "rank " << r;
      ++released;
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(released.load(), 0) << "ranks 0 and 1 must wait for rank 2";
  comms[2]->abort();
  for (auto& t : waiting) t.join();
  EXPECT_EQ(released.load(), 2);
  Tensor y = Tensor::empty({4}, DType::F32);
  EXPECT_THROW(comms[2]->all_reduce_sum(y), CollectiveAborted);
  Tensor out = Tensor::empty({4, 3}, DType::F32);
  EXPECT_THROW(comms[0]->all_gather_columns(y.reshape({4, 1}), out), CollectiveAborted);
}

// Uneven column counts land side by side in rank order, on every rank.
TEST_P(Collectives, AllGatherColumnsPlacesEachRanksColumns) {
  const int size = 3;
  const int64_t M = 5;
  const int64_t cols[size] = {4, 3, 3};
  std::vector<std::vector<float>> got(size);
  on_ranks(size, [&](int rank, Communicator& c) {
    Tensor x = Tensor::empty({M, cols[rank]}, DType::F32);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < cols[rank]; ++j) x.data<float>()[m * cols[rank] + j] = float(rank * 100 + m * 10 + j);
    Tensor out = Tensor::empty({M, 10}, DType::F32);
    c.all_gather_columns(x, out);
    got[size_t(rank)].assign(out.data<float>(), out.data<float>() + M * 10);
  });
  for (int r = 0; r < size; ++r)
    for (int64_t m = 0; m < M; ++m) {
      int64_t col = 0;
      for (int src = 0; src < size; ++src)
        for (int64_t j = 0; j < cols[src]; ++j, ++col)
          ASSERT_EQ(got[size_t(r)][size_t(m * 10 + col)], float(src * 100 + m * 10 + j))
              << "rank " << r << " row " << m << " column " << col;
    }
}

// A rank whose process dies (its connection closes) does not leave the others waiting: rank 0
// sees the connection end and aborts, which ends rank 1's wait too.
TEST(SocketCommunicator, ARankThatGoesAwayEndsTheOthersCollectives) {
  auto comms = make_group(Kind::kSockets, 3);
  std::vector<std::thread> waiting;
  for (int r = 0; r < 2; ++r)
    waiting.emplace_back([&, r] {
      Tensor x = Tensor::empty({1000}, DType::F32);
      std::fill_n(x.data<float>(), 1000, 1.0f);
      EXPECT_THROW(comms[size_t(r)]->all_reduce_sum(x), CollectiveAborted) << "rank " << r;
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comms[2].reset();  // its socket closes, as when the process ends
  for (auto& t : waiting) t.join();
}

// NCCL between the GPUs of this process: every GPU a rank on its own thread. The sum of
// small integers is exact in any order, so every rank must hold exactly the sum; the gather
// puts each rank's columns in rank order. Runs on as many GPUs as there are (one: NCCL's
// path with one rank); skipped without a GPU.
TEST(NcclCommunicator, AllReduceAndGatherOnEveryGpu) {
  const int gpus = cuda_device_count();
  if (gpus == 0) GTEST_SKIP() << "no CUDA device in this process";
  std::vector<int> devices(static_cast<size_t>(gpus));
  for (int d = 0; d < gpus; ++d) devices[size_t(d)] = d;
  auto comms = make_nccl_communicators(devices);
  ASSERT_EQ(comms.size(), size_t(gpus));
  const int64_t m = 3, n = 5;
  std::vector<std::vector<float>> reduced(static_cast<size_t>(gpus)),
      gathered(static_cast<size_t>(gpus)), uneven(static_cast<size_t>(gpus));
  // A vocabulary that does not split evenly: the first gpus - 1 ranks hold one more column
  // (share_of's split, which the NCCL gather pads to equal blocks and unpads).
  const int64_t total = (n + 1) * gpus - 1;
  const auto width = [&](int r) { return n + (r < gpus - 1 ? 1 : 0); };
  const auto first = [&](int r) { return int64_t(r) * n + std::min(r, gpus - 1); };
  std::vector<std::thread> threads;
  for (int r = 0; r < gpus; ++r)
    threads.emplace_back([&, r] {
      Communicator& c = *comms[size_t(r)];
      EXPECT_EQ(c.rank(), r);
      const Device dev{DeviceKind::Cuda, r};
      Tensor x = Tensor::empty({m, n}, DType::F32);
      for (int64_t i = 0; i < m * n; ++i) x.data<float>()[i] = float(i + 100 * r);
      Tensor xd = x.to(dev);
      c.all_reduce_sum(xd);
      const Tensor back = xd.to(kCpu);
      reduced[size_t(r)].assign(back.data<float>(), back.data<float>() + m * n);
      Tensor out = Tensor::empty({m, n * gpus}, DType::F32, dev);
      c.all_gather_columns(x.to(dev), out);
      const Tensor g = out.to(kCpu);
      gathered[size_t(r)].assign(g.data<float>(), g.data<float>() + g.numel());
      Tensor part = Tensor::empty({m, width(r)}, DType::F32);
      for (int64_t row = 0; row < m; ++row)
        for (int64_t j = 0; j < width(r); ++j)
          part.data<float>()[row * width(r) + j] = float(row * 1000 + first(r) + j);
      Tensor whole = Tensor::empty({m, total}, DType::F32, dev);
      c.all_gather_columns(part.to(dev), whole);
      const Tensor u = whole.to(kCpu);
      uneven[size_t(r)].assign(u.data<float>(), u.data<float>() + u.numel());
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < gpus; ++r) {
    for (int64_t i = 0; i < m * n; ++i) {
      float want = 0;
      for (int q = 0; q < gpus; ++q) want += float(i + 100 * q);
      ASSERT_EQ(reduced[size_t(r)][size_t(i)], want) << "rank " << r << " element " << i;
    }
    for (int64_t row = 0; row < m; ++row)
      for (int q = 0; q < gpus; ++q)
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(gathered[size_t(r)][size_t(row * n * gpus + q * n + j)],
                    float(row * n + j + 100 * q))
              << "rank " << r << " row " << row << " from rank " << q;
    for (int64_t row = 0; row < m; ++row)
      for (int64_t col = 0; col < total; ++col)
        ASSERT_EQ(uneven[size_t(r)][size_t(row * total + col)], float(row * 1000 + col))
            << "uneven shares: rank " << r << " row " << row << " column " << col;
  }
}

// Without CUDA the factory refuses with a message, not a crash.
TEST(NcclCommunicator, RefusesWithoutDevices) {
  EXPECT_THROW(make_nccl_communicators({}), Error);
  EXPECT_THROW(make_nccl_communicators({cuda_device_count()}), Error);
}
