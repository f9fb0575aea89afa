#include "runtime/cpu/cpu_backend.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "runtime/ops.h"
#include "util/check.h"

namespace vllm {
namespace cpu {

void* CpuBackend::alloc(size_t bytes) {
  // 64-byte alignment for vector loads; round the size up as aligned_alloc requires.
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return p;
}

void CpuBackend::free(void* ptr) { std::free(ptr); }

void CpuBackend::copy(void* dst, Device dst_device, const void* src, Device src_device,
                      size_t bytes) {
  VLLM_CHECK(dst_device.kind == DeviceKind::Cpu && src_device.kind == DeviceKind::Cpu,
             "CPU backend copy between ", src_device.str(), " and ", dst_device.str());
  std::memcpy(dst, src, bytes);
}

namespace {
std::atomic<CpuOrder> g_order{CpuOrder::kBatchInvariant};
}  // namespace

CpuBackend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace cpu

void set_cpu_order(CpuOrder order) { cpu::g_order.store(order); }
CpuOrder cpu_order() { return cpu::g_order.load(); }

CpuOrder parse_cpu_order(const std::string& name) {
  if (name == "batch-invariant") return CpuOrder::kBatchInvariant;
  if (name == "llamacpp") return CpuOrder::kLlamaCpp;
  throw Error("--cpu-order '" + name + "': expected batch-invariant or llamacpp");
}

}  // namespace vllm
