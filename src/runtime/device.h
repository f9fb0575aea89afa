// Which accelerators this process can use. No CUDA types here, so that model/ and engine/
// need no #ifdef: without the CUDA backend compiled in, cuda_device_count() is 0.
#pragma once
#include <cstddef>
#include <string>

#include "runtime/tensor.h"

namespace vllm {

class Backend;

// Usable CUDA devices (0 when the build has no CUDA backend or the machine no GPU).
int cuda_device_count();
// The backend of cuda:index; throws vllm::Error when there is no such device.
Backend& cuda_backend(int index);

// Tests only: per_gpu backends on each GPU, so that the tensor-parallel ranks of a test run on
// a one-GPU machine. cuda:i is a backend of its own (stream, step arena, cuBLASLt handle) on
// GPU i % cuda_device_count(), for i below cuda_device_count() * per_gpu (backends made
// before keep their GPU). NCCL refuses a GPU twice, so ranks that share one are joined through
// the host (make_thread_communicators), without decode graphs.
void set_cuda_backends_per_gpu(int per_gpu);
int cuda_backends_per_gpu();
// The GPU behind cuda:index (index itself unless set_cuda_backends_per_gpu).
int cuda_physical_device(int index);

struct DeviceInfo {
  std::string name;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  int multiprocessors = 0;
};
DeviceInfo cuda_device_info(int index);

// "cpu", "cuda" or "cuda:N"; throws vllm::Error on anything else or a device not present.
Device parse_device(const std::string& name);

}  // namespace vllm
