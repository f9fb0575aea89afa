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
