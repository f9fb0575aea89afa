#include "runtime/communicator.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "runtime/backend.h"
#include "util/check.h"

namespace vllm {
namespace {

// A barrier that abort() opens for good: every rank waiting in it, and every later arrival,
// throws CollectiveAborted. Waiters sleep on the generation counter (a futex, as std::barrier;
// measured as fast as std::barrier with 2 and 3 ranks on 2 cores, where spinning is not:
// a spinning rank takes the core of the rank it waits for).
class AbortableBarrier {
 public:
  explicit AbortableBarrier(int n) : size_(n) {}
  void arrive_and_wait() {
    const uint64_t generation = generation_.load(std::memory_order_acquire);
    if (generation & kAborted) throw CollectiveAborted();
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == size_) {
      // The others wait for the next generation, so none arrives again before this reset.
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_acq_rel);
      generation_.notify_all();
      return;
    }
    uint64_t now;
    while ((now = generation_.load(std::memory_order_acquire)) == generation)
      generation_.wait(generation, std::memory_order_acquire);
    if (now & kAborted) throw CollectiveAborted();
  }
  void abort() {
    generation_.fetch_or(kAborted, std::memory_order_acq_rel);
    generation_.notify_all();
  }

 private:
  static constexpr uint64_t kAborted = uint64_t(1) << 63;
  const int size_;
  std::atomic<int> arrived_{0};
  std::atomic<uint64_t> generation_{0};
};

// What the ranks share: each posts a pointer to its input, then works on its own part of the
// result while the others do theirs. Two barriers per collective: inputs posted, work done;
// a third before anyone may post the next collective's input.
struct Shared {
  explicit Shared(int n) : size(n), inputs(size_t(n)), columns(size_t(n)), sync(n) {}
  int size;
  std::vector<const float*> inputs;
  std::vector<int64_t> columns;  // all_gather_columns: each rank's N_r
  std::vector<float> result;
  AbortableBarrier sync;
};

class ThreadCommunicator final : public HostCommunicator {
 public:
  ThreadCommunicator(std::shared_ptr<Shared> shared, int rank)
      : shared_(std::move(shared)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return shared_->size; }

  void host_all_reduce_sum(Tensor& x) override {
    Shared& s = *shared_;
    const int64_t n = x.numel();
    if (rank_ == 0) s.result.resize(size_t(n));  // nobody reads it before the barrier
    s.inputs[size_t(rank_)] = x.data<float>();
    s.sync.arrive_and_wait();
    // Rank r adds up its share of the elements, every rank's value in rank order.
    const int64_t begin = n * rank_ / s.size, end = n * (rank_ + 1) / s.size;
    for (int64_t i = begin; i < end; ++i) {
      float sum = s.inputs[0][i];
      for (int r = 1; r < s.size; ++r) sum += s.inputs[size_t(r)][i];
      s.result[size_t(i)] = sum;
    }
    s.sync.arrive_and_wait();
    std::memcpy(x.data<float>(), s.result.data(), size_t(n) * sizeof(float));
    s.sync.arrive_and_wait();
  }

  void host_all_gather_columns(const Tensor& x, Tensor& out) override {
    Shared& s = *shared_;
    s.inputs[size_t(rank_)] = x.data<float>();
    s.columns[size_t(rank_)] = x.size(1);
    s.sync.arrive_and_wait();
    int64_t total = 0;
    for (int64_t c : s.columns) total += c;
    VLLM_CHECK(out.size(1) == total, "all_gather_columns: out has ", out.size(1),
               " columns, the ranks give ", total);
    // Each rank copies every rank's columns into its own `out`: the inputs stay untouched.
    const int64_t M = x.size(0);
    int64_t offset = 0;
    for (int r = 0; r < s.size; ++r) {
      const int64_t cols = s.columns[size_t(r)];
      for (int64_t m = 0; m < M; ++m)
        std::memcpy(out.data<float>() + m * total + offset, s.inputs[size_t(r)] + m * cols,
                    size_t(cols) * sizeof(float));
      offset += cols;
    }
    s.sync.arrive_and_wait();
  }

  void abort() override { shared_->sync.abort(); }

 private:
  std::shared_ptr<Shared> shared_;
  int rank_;
};

}  // namespace

void HostCommunicator::all_reduce_sum(Tensor& x) {
  if (x.device().kind != DeviceKind::Cpu) {  // through the host
    Tensor h = x.to(kCpu);
    host_all_reduce_sum(h);
    backend_for(x.device()).copy(x.raw(), x.device(), h.raw(), kCpu, size_t(h.nbytes()));
    return;
  }
  check_host_f32(x);
  host_all_reduce_sum(x);
}

void HostCommunicator::all_gather_columns(const Tensor& x, Tensor& out) {
  if (out.device().kind != DeviceKind::Cpu) {  // through the host
    VLLM_CHECK(out.is_contiguous(), "all_gather_columns: out must be contiguous");
    Tensor h = Tensor::empty(out.shape(), DType::F32);
    all_gather_columns(x.to(kCpu), h);
    backend_for(out.device()).copy(out.raw(), out.device(), h.raw(), kCpu, size_t(h.nbytes()));
    return;
  }
  check_host_f32(x);
  check_host_f32(out);
  VLLM_CHECK(x.ndim() == 2 && out.ndim() == 2 && out.size(0) == x.size(0),
             "all_gather_columns: x ", x.shape_str(), ", out ", out.shape_str());
  host_all_gather_columns(x, out);
}

void HostCommunicator::check_host_f32(const Tensor& t) {
  VLLM_CHECK(t.device() == kCpu && t.dtype() == DType::F32 && t.is_contiguous(),
             "host communicator: f32 contiguous tensors only, got ", dtype_name(t.dtype()), " ",
             t.shape_str(), " on ", t.device().str());
}

bool is_collective_abort(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const CollectiveAborted&) {
    return true;
  } catch (...) {
    return false;
  }
}

std::vector<std::shared_ptr<Communicator>> make_thread_communicators(int size) {
  VLLM_CHECK(size >= 1, "communicator size ", size);
  auto shared = std::make_shared<Shared>(size);
  std::vector<std::shared_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_shared<ThreadCommunicator>(shared, r));
  return out;
}

}  // namespace vllm
