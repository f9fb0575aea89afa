// Stands in for the CUDA backend in builds without nvcc: no devices, clear errors.
#include "runtime/communicator.h"
#include "runtime/device.h"
#include "util/check.h"

namespace vllm {

int cuda_device_count() { return 0; }

Backend& cuda_backend(int index) {
  throw Error("cuda:" + std::to_string(index) +
              " requested, but this build has no CUDA backend (nvcc was not found)");
}

DeviceInfo cuda_device_info(int index) { (void)cuda_backend(index); return {}; }

void set_cuda_backends_per_gpu(int) {}
int cuda_backends_per_gpu() { return 1; }
int cuda_physical_device(int index) { return index; }

namespace {
[[noreturn]] void no_cuda() {
  throw Error("tensor parallel on CUDA requested, but this build has no CUDA backend (nvcc was "
              "not found)");
}
}  // namespace

std::vector<std::shared_ptr<Communicator>> make_nccl_communicators(const std::vector<int>&) {
  no_cuda();
}
std::string nccl_unique_id() { no_cuda(); }
std::vector<std::shared_ptr<Communicator>> make_nccl_communicators(const std::vector<int>&, int,
                                                                   int, const std::string&) {
  no_cuda();
}

}  // namespace vllm
