// Collectives among the ranks of a tensor-parallel group. Every rank calls each collective in
// the same order with tensors of the same shape; a reduction adds the ranks' values in rank
// order, so every rank ends with the same bits.
#pragma once
#include <memory>
#include <vector>

#include "runtime/tensor.h"

namespace vllm {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // x = the sum of every rank's x ([..] f32, contiguous).
  virtual void all_reduce_sum(Tensor& x) = 0;
  // out [M, sum of N_r] = the ranks' x [M, N_r] side by side in rank order (f32, contiguous).
  virtual void all_gather_columns(const Tensor& x, Tensor& out) = 0;
};

// The communicators of `size` ranks that are threads of this process, for CPU tensors:
// element i of the result belongs to rank i. The ranks meet at barriers, so each one needs its
// own thread.
std::vector<std::shared_ptr<Communicator>> make_thread_communicators(int size);

// The communicators of this process's GPUs cuda:devices[0..n), over NCCL: element i is rank i,
// its collectives on that device's compute stream, for f32 tensors on that device. NCCL's
// reductions give every rank the same bits, in its own order (not rank order). all_gather_columns
// needs every rank's x to have the same shape. Throws when there is no CUDA or no NCCL.
std::vector<std::shared_ptr<Communicator>> make_nccl_communicators(const std::vector<int>& devices);

}  // namespace vllm
