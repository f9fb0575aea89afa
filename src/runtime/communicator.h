// Collectives among the ranks of a tensor-parallel group. Every rank calls each collective in
// the same order with tensors of the same shape; a reduction adds the ranks' values in rank
// order, so every rank ends with the same bits.
#pragma once
#include <exception>
#include <memory>
#include <vector>

#include "runtime/tensor.h"
#include "util/check.h"
#include "util/net.h"

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
  // Ends the group for good, from any thread: a rank waiting in a collective, and every later
  // collective of any rank, throws CollectiveAborted. What the executor calls when one rank
  // fails, so that the others stop instead of waiting for it forever.
  virtual void abort() = 0;
  // Whether the collectives can be captured in a CUDA graph (NCCL's can; a host round trip
  // cannot).
  virtual bool capturable() const { return false; }
};

// A communicator whose collectives work on host memory: tensors on a GPU are copied through
// the host (so not capturable). Subclasses get host f32 contiguous tensors, x and out of
// all_gather_columns with the same rows.
class HostCommunicator : public Communicator {
 public:
  void all_reduce_sum(Tensor& x) final;
  void all_gather_columns(const Tensor& x, Tensor& out) final;

 protected:
  virtual void host_all_reduce_sum(Tensor& x) = 0;
  virtual void host_all_gather_columns(const Tensor& x, Tensor& out) = 0;
  static void check_host_f32(const Tensor& t);
};

// The error of a collective in an aborted group (Communicator::abort).
class CollectiveAborted : public Error {
 public:
  CollectiveAborted() : Error("the tensor-parallel group was aborted (another rank failed)") {}
};
// Whether `e` holds a CollectiveAborted: a rank stopped by another's failure, not the failure.
bool is_collective_abort(const std::exception_ptr& e);

// The communicators of `size` ranks that are threads of this process: element i of the result
// belongs to rank i. The ranks meet at barriers, so each one needs its own thread. Their
// tensors are on the host, or on a GPU (ranks sharing one, cuda_backends_per_gpu: copied
// through the host, so not capturable).
std::vector<std::shared_ptr<Communicator>> make_thread_communicators(int size);

// The communicator of rank `rank` of `size` ranks in different processes (tensor parallel
// across nodes, on the CPU), over TCP: rank 0 receives every rank's values, adds them in rank
// order or places their columns, and sends the result back, so the bits are the thread
// communicators'. `peers`: on rank 0 the connections of ranks 1..size-1 in rank order, on
// another rank its connection to rank 0. A lost connection throws CollectiveAborted (the
// failure itself reaches the executor from the failing node); abort() shuts the sockets.
std::shared_ptr<Communicator> make_socket_communicator(int rank, int size,
                                                       std::vector<net::Socket> peers);

// The communicators of this process's GPUs cuda:devices[0..n), over NCCL: element i is rank i,
// its collectives on that device's compute stream, for f32 tensors on that device. NCCL's
// reductions give every rank the same bits, in its own order (not rank order). all_gather_columns
// needs the ranks' widths to be the even split of out's columns (the first out.size(1) % size
// ranks one more, as model/tensor_parallel.h share_of). Throws when there is no CUDA or no NCCL.
std::vector<std::shared_ptr<Communicator>> make_nccl_communicators(const std::vector<int>& devices);

// NCCL across processes: one process makes the group's id (nccl_unique_id, 128 bytes) and
// hands it to the others (runtime/node_group.h); each joins its GPUs cuda:devices[j] as ranks
// first_rank + j of world_size. Same collectives as above.
std::string nccl_unique_id();
std::vector<std::shared_ptr<Communicator>> make_nccl_communicators(
    const std::vector<int>& devices, int first_rank, int world_size,
    const std::string& unique_id);

}  // namespace vllm
