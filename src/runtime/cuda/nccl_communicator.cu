// Tensor-parallel collectives between the GPUs of one process over NCCL (runtime/communicator.h
// make_nccl_communicators). NCCL is opened with dlopen on first use, as cuBLASLt is: linked
// normally, its library would be mapped by every run, CPU-only ones too. Each collective runs on
// its rank's compute stream (the CUDA backend's), ordered with the kernels around it, so a
// captured decode graph can hold it; the caller's thread gets the rank's device set first.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "runtime/communicator.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/dynamic_library.h"
#include "runtime/device.h"
#include "runtime/ops.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define VLLM_HAVE_NCCL 1
#endif

namespace vllm {

#ifdef VLLM_HAVE_NCCL
namespace {

struct Nccl {
#define VLLM_NCCL_FN(name) decltype(&::name) name = nullptr;
  VLLM_NCCL_FN(ncclCommInitAll)
  VLLM_NCCL_FN(ncclGetUniqueId)
  VLLM_NCCL_FN(ncclCommInitRank)
  VLLM_NCCL_FN(ncclGroupStart)
  VLLM_NCCL_FN(ncclGroupEnd)
  VLLM_NCCL_FN(ncclCommDestroy)
  VLLM_NCCL_FN(ncclCommAbort)
  VLLM_NCCL_FN(ncclAllReduce)
  VLLM_NCCL_FN(ncclAllGather)
  VLLM_NCCL_FN(ncclGetErrorString)
#undef VLLM_NCCL_FN
};

const Nccl& nccl() {
  static const Nccl table = [] {
    const cuda::DynamicLibrary lib({"libnccl.so.2", "libnccl.so"},
                             "NCCL (tensor parallel on CUDA needs libnccl.so.2)");
    Nccl t;
#define VLLM_NCCL_BIND(name) lib.bind(t.name, #name);
    VLLM_NCCL_BIND(ncclCommInitAll)
    VLLM_NCCL_BIND(ncclGetUniqueId)
    VLLM_NCCL_BIND(ncclCommInitRank)
    VLLM_NCCL_BIND(ncclGroupStart)
    VLLM_NCCL_BIND(ncclGroupEnd)
    VLLM_NCCL_BIND(ncclCommDestroy)
    VLLM_NCCL_BIND(ncclCommAbort)
    VLLM_NCCL_BIND(ncclAllReduce)
    VLLM_NCCL_BIND(ncclAllGather)
    VLLM_NCCL_BIND(ncclGetErrorString)
#undef VLLM_NCCL_BIND
    return t;
  }();
  return table;
}

void check(ncclResult_t r, const char* what) {
  VLLM_CHECK(r == ncclSuccess, what, " failed: ", nccl().ncclGetErrorString(r));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device)
      : comm_(comm), rank_(rank), size_(size), device_(device),
        backend_(static_cast<cuda::CudaBackend&>(cuda_backend(device))) {}
  ~NcclCommunicator() override {
    if (!aborted_.exchange(true)) nccl().ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool capturable() const override { return true; }

  // NCCL ends the collectives in flight (their kernels stop waiting for the other ranks).
  void abort() override {
    if (!aborted_.exchange(true)) nccl().ncclCommAbort(comm_);
  }

  void all_reduce_sum(Tensor& x) override {
    if (aborted_) throw CollectiveAborted();
    expect_here(x, "all_reduce_sum");
    VLLM_CUDA_CHECK(cudaSetDevice(device_));
    checked(nccl().ncclAllReduce(x.raw(), x.raw(), size_t(x.numel()), ncclFloat32, ncclSum, comm_,
                                 backend_.stream()),
            "ncclAllReduce");
  }

  // NCCL gathers equal blocks rank after rank: each rank's columns, padded to the widest
  // share, into [size, M, widest] first, then each rank's share into its columns of out.
  void all_gather_columns(const Tensor& x, Tensor& out) override {
    if (aborted_) throw CollectiveAborted();
    expect_here(x, "all_gather_columns");
    expect_here(out, "all_gather_columns");
    const int64_t m = x.size(0), total = out.size(1);
    const int64_t base = total / size_, extra = total % size_;
    const auto width = [&](int r) { return base + (r < extra ? 1 : 0); };
    const auto first = [&](int r) { return r * base + std::min<int64_t>(r, extra); };
    const int64_t widest = base + (extra > 0 ? 1 : 0);
    VLLM_CHECK(x.ndim() == 2 && out.ndim() == 2 && out.size(0) == m && x.size(1) == width(rank_),
               "all_gather_columns on NCCL: rank ", rank_, " of ", size_, " gives [M, ",
               width(rank_), "] columns of out [M, ", total, "]; got ", x.shape_str(), " and ",
               out.shape_str());
    VLLM_CUDA_CHECK(cudaSetDevice(device_));
    Tensor mine = x;
    if (x.size(1) != widest) {
      mine = Tensor::empty({m, widest}, DType::F32, x.device());
      Tensor cols = mine.slice(1, 0, x.size(1));
      copy_strided(x, cols);  // the padding column is sent but never read
    }
    Tensor blocks = Tensor::empty({size_, m, widest}, DType::F32, x.device());
    checked(nccl().ncclAllGather(mine.raw(), blocks.raw(), size_t(m * widest), ncclFloat32,
                                 comm_, backend_.stream()),
            "ncclAllGather");
    for (int r = 0; r < size_; ++r) {
      Tensor cols = out.slice(1, first(r), width(r));
      copy_strided(blocks.narrow(r, 1).reshape({m, widest}).slice(1, 0, width(r)), cols);
    }
  }

 private:
  // A collective that fails because the group was aborted meanwhile (another rank or node
  // failed) is that abort, not a failure of this rank.
  void checked(ncclResult_t r, const char* what) const {
    if (r != ncclSuccess && aborted_) throw CollectiveAborted();
    check(r, what);
  }

  void expect_here(const Tensor& t, const char* op) const {
    const Device here{DeviceKind::Cuda, device_};
    VLLM_CHECK(t.device() == here && t.dtype() == DType::F32 && t.is_contiguous(),
               op, " on NCCL rank ", rank_, ": a contiguous f32 tensor on cuda:", device_,
               " (got ", t.device().str(), ")");
  }

  ncclComm_t comm_;
  std::atomic<bool> aborted_{false};
  int rank_, size_, device_;
  cuda::CudaBackend& backend_;
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_nccl_communicators(const std::vector<int>& devices) {
  const int n = static_cast<int>(devices.size());
  VLLM_CHECK(n > 0, "make_nccl_communicators: no devices");
  for (int d : devices)
    VLLM_CHECK(d >= 0 && d < cuda_device_count(), "cuda:", d, " does not exist (",
               cuda_device_count(), " CUDA devices)");
  for (int d : devices) (void)cuda_backend(d);  // each device's stream exists before NCCL's
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  check(nccl().ncclCommInitAll(comms.data(), n, devices.data()), "ncclCommInitAll");
  std::vector<std::shared_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r)
    out.push_back(std::make_shared<NcclCommunicator>(comms[size_t(r)], r, n, devices[size_t(r)]));
  return out;
}

std::string nccl_unique_id() {
  ncclUniqueId id;
  check(nccl().ncclGetUniqueId(&id), "ncclGetUniqueId");
  return std::string(id.internal, sizeof id.internal);
}

std::vector<std::shared_ptr<Communicator>> make_nccl_communicators(
    const std::vector<int>& devices, int first_rank, int world_size,
    const std::string& unique_id) {
  const int n = static_cast<int>(devices.size());
  VLLM_CHECK(n > 0 && first_rank >= 0 && first_rank + n <= world_size,
             "make_nccl_communicators: ranks ", first_rank, "..", first_rank + n - 1, " of ",
             world_size);
  ncclUniqueId id;
  VLLM_CHECK(unique_id.size() == sizeof id.internal, "an NCCL unique id of ", unique_id.size(),
             " bytes");
  std::memcpy(id.internal, unique_id.data(), sizeof id.internal);
  for (int d : devices)
    VLLM_CHECK(d >= 0 && d < cuda_device_count(), "cuda:", d, " does not exist (",
               cuda_device_count(), " CUDA devices)");
  for (int d : devices) (void)cuda_backend(d);
  // Several ranks of one process join in a group call (each would wait for the others alone).
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  check(nccl().ncclGroupStart(), "ncclGroupStart");
  for (int j = 0; j < n; ++j) {
    VLLM_CUDA_CHECK(cudaSetDevice(devices[size_t(j)]));
    check(nccl().ncclCommInitRank(&comms[size_t(j)], world_size, id, first_rank + j),
          "ncclCommInitRank");
  }
  check(nccl().ncclGroupEnd(), "ncclGroupEnd (joining the tensor-parallel group)");
  std::vector<std::shared_ptr<Communicator>> out;
  for (int j = 0; j < n; ++j)
    out.push_back(std::make_shared<NcclCommunicator>(comms[size_t(j)], first_rank + j,
                                                     world_size, devices[size_t(j)]));
  return out;
}

#else

std::vector<std::shared_ptr<Communicator>> make_nccl_communicators(const std::vector<int>&) {
  throw Error("this build has no NCCL (nccl.h was not found with the CUDA toolkit)");
}
std::string nccl_unique_id() {
  throw Error("this build has no NCCL (nccl.h was not found with the CUDA toolkit)");
}
std::vector<std::shared_ptr<Communicator>> make_nccl_communicators(const std::vector<int>&, int,
                                                                   int, const std::string&) {
  throw Error("this build has no NCCL (nccl.h was not found with the CUDA toolkit)");
}

#endif

}  // namespace vllm
