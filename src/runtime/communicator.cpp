#include "runtime/communicator.h"

#include <algorithm>
#include <barrier>
#include <cstring>

#include "util/check.h"

namespace vllm {
namespace {

// What the ranks share: each posts a pointer to its input, then works on its own part of the
// result while the others do theirs. Two barriers per collective: inputs posted, work done;
// a third before anyone may post the next collective's input.
struct Shared {
  explicit Shared(int n) : size(n), inputs(size_t(n)), columns(size_t(n)), sync(n) {}
  int size;
  std::vector<const float*> inputs;
  std::vector<int64_t> columns;  // all_gather_columns: each rank's N_r
  std::vector<float> result;
  std::barrier<> sync;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Shared> shared, int rank)
      : shared_(std::move(shared)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return shared_->size; }

  void all_reduce_sum(Tensor& x) override {
    check_host_f32(x);
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

  void all_gather_columns(const Tensor& x, Tensor& out) override {
    check_host_f32(x);
    check_host_f32(out);
    VLLM_CHECK(x.ndim() == 2 && out.ndim() == 2 && out.size(0) == x.size(0),
               "all_gather_columns: x ", x.shape_str(), ", out ", out.shape_str());
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

 private:
  static void check_host_f32(const Tensor& t) {
    VLLM_CHECK(t.device() == kCpu && t.dtype() == DType::F32 && t.is_contiguous(),
               "thread communicator: host f32 contiguous tensors only, got ",
               dtype_name(t.dtype()), " ", t.shape_str(), " on ", t.device().str());
  }

  std::shared_ptr<Shared> shared_;
  int rank_;
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_thread_communicators(int size) {
  VLLM_CHECK(size >= 1, "communicator size ", size);
  auto shared = std::make_shared<Shared>(size);
  std::vector<std::shared_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_shared<ThreadCommunicator>(shared, r));
  return out;
}

}  // namespace vllm
