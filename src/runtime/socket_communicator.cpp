// Tensor-parallel collectives between processes on the CPU (runtime/communicator.h
// make_socket_communicator): a star around rank 0, which adds in rank order as the thread
// communicators do, so a model split over processes gives the bits of one split over threads.
#include <atomic>
#include <cstring>

#include "runtime/communicator.h"

namespace vllm {
namespace {

class SocketCommunicator final : public HostCommunicator {
 public:
  SocketCommunicator(int rank, int size, std::vector<net::Socket> peers)
      : rank_(rank), size_(size), peers_(std::move(peers)) {
    VLLM_CHECK(size >= 2 && rank >= 0 && rank < size, "socket communicator: rank ", rank,
               " of ", size);
    VLLM_CHECK(peers_.size() == size_t(rank == 0 ? size - 1 : 1), "socket communicator: rank ",
               rank, " of ", size, " given ", peers_.size(), " connections");
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void abort() override {
    aborted_ = true;
    for (auto& p : peers_) p.shutdown();
  }

 protected:
  void host_all_reduce_sum(Tensor& x) override {
    const size_t bytes = size_t(x.numel()) * sizeof(float);
    guarded([&] {
      if (rank_ != 0) {
        peers_[0].send_all(x.raw(), bytes);
        peers_[0].recv_all(x.raw(), bytes);
        return;
      }
      // Every rank's values first, then the sums in rank order: x0 + x1 + ... + x(n-1).
      inputs_.resize(size_t(size_ - 1) * size_t(x.numel()));
      for (int r = 1; r < size_; ++r)
        peers_[size_t(r - 1)].recv_all(inputs_.data() + size_t(r - 1) * x.numel(), bytes);
      float* sum = x.data<float>();
      for (int64_t i = 0; i < x.numel(); ++i)
        for (int r = 1; r < size_; ++r) sum[i] += inputs_[size_t(r - 1) * x.numel() + i];
      for (auto& p : peers_) p.send_all(sum, bytes);
    });
  }

  void host_all_gather_columns(const Tensor& x, Tensor& out) override {
    const int64_t m = x.size(0), total = out.size(1);
    guarded([&] {
      if (rank_ != 0) {
        const int64_t cols = x.size(1);
        peers_[0].send_all(&cols, sizeof cols);
        peers_[0].send_all(x.raw(), size_t(x.numel()) * sizeof(float));
        peers_[0].recv_all(out.raw(), size_t(out.numel()) * sizeof(float));
        return;
      }
      // Rank 0 places each rank's columns in rank order, then sends every rank the whole.
      int64_t offset = 0;
      for (int r = 0; r < size_; ++r) {
        int64_t cols = x.size(1);
        const float* src = x.data<float>();
        if (r > 0) {
          peers_[size_t(r - 1)].recv_all(&cols, sizeof cols);
          VLLM_CHECK(cols >= 0 && offset + cols <= total, "all_gather_columns: rank ", r,
                     " sends ", cols, " columns, past out's ", total);
          inputs_.resize(size_t(m * cols));
          peers_[size_t(r - 1)].recv_all(inputs_.data(), inputs_.size() * sizeof(float));
          src = inputs_.data();
        }
        for (int64_t i = 0; i < m; ++i)
          std::memcpy(out.data<float>() + i * total + offset, src + i * cols,
                      size_t(cols) * sizeof(float));
        offset += cols;
      }
      VLLM_CHECK(offset == total, "all_gather_columns: out has ", total,
                 " columns, the ranks give ", offset);
      for (auto& p : peers_) p.send_all(out.raw(), size_t(out.numel()) * sizeof(float));
    });
  }

 private:
  // A lost connection, or one this rank shut in abort(): the group is over.
  template <typename F>
  void guarded(F&& f) {
    if (aborted_) throw CollectiveAborted();
    try {
      f();
    } catch (const net::ConnectionClosed&) {
      abort();
      throw CollectiveAborted();
    }
  }

  const int rank_, size_;
  std::vector<net::Socket> peers_;
  std::vector<float> inputs_;  // rank 0: what the other ranks sent
  std::atomic<bool> aborted_{false};
};

}  // namespace

std::shared_ptr<Communicator> make_socket_communicator(int rank, int size,
                                                       std::vector<net::Socket> peers) {
  return std::make_shared<SocketCommunicator>(rank, size, std::move(peers));
}

}  // namespace vllm
