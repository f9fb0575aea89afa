// Device -> backend routing and device names.
#include "runtime/backend.h"

#include "runtime/cpu/cpu_backend.h"
#include "runtime/device.h"
#include "util/check.h"

namespace vllm {

Backend& backend_for(Device device) {
  if (device.kind == DeviceKind::Cpu) return cpu::cpu_backend();
  return cuda_backend(device.index);
}

void Backend::begin_capture() { throw Error(device().str() + " cannot capture graphs"); }
std::shared_ptr<void> Backend::end_capture() { throw Error(device().str() + " cannot capture graphs"); }
void Backend::replay(const std::shared_ptr<void>&) {
  throw Error(device().str() + " cannot replay graphs");
}
void Backend::matmul_heads(const Tensor& x, const Tensor& w, Tensor& out) {
  for (int64_t h = 0; h < w.size(0); ++h) {
    Tensor out_h = out.slice(1, h, 1).merge_last();
    matmul(x.slice(1, h, 1).merge_last(), w.narrow(h, 1).reshape({w.size(1), w.size(2)}), out_h);
  }
}

void Backend::quantize_fp8_weight(const Tensor&, Tensor&, int64_t) {
  throw Error(device().str() + " quantizes weights on the host, not with quantize_fp8_weight");
}

void Backend::round_fp8_per_tensor(Tensor&) {
  throw Error(device().str() + " quantizes weights on the host, not with round_fp8_per_tensor");
}

void Backend::moe_route(const Tensor&, const Tensor&, const MoeRouting&, Tensor&, Tensor&,
                        Tensor&) {
  throw Error(device().str() + " routes experts on the host, not with moe_route");
}
void Backend::moe_align(const Tensor&, int, MoePlan&) {
  throw Error(device().str() + " has no moe_align");
}
void Backend::moe_route_align(const Tensor& scores, const Tensor& bias, const MoeRouting& r,
                              Tensor& ids, Tensor& weights, Tensor& margins, int num_experts,
                              MoePlan& plan) {
  moe_route(scores, bias, r, ids, weights, margins);
  moe_align(ids, num_experts, plan);
}
void Backend::moe_matmul(const Tensor&, const Tensor&, const Tensor&, const MoePlan&, bool,
                         Tensor&) {
  throw Error(device().str() + " has no moe_matmul");
}
void Backend::moe_combine(const Tensor&, const Tensor&, const Tensor&, const MoePlan&,
                          const Tensor&, bool, Tensor&) {
  throw Error(device().str() + " has no moe_combine");
}

void Backend::mla_prefill_attention(const Tensor&, const Tensor&, const AttentionMeta&, int, int,
                                    float, int, Tensor&) {
  throw Error(device().str() + " has no mla_prefill_attention");
}

void Backend::sample_rows(const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  throw Error(device().str() + " samples on the host (model/sampler.h), not with sample_rows");
}

Device parse_device(const std::string& name) {
  if (name == "cpu") return kCpu;
  int index = 0;
  if (name.rfind("cuda:", 0) == 0) {
    const std::string n = name.substr(5);
    VLLM_CHECK(!n.empty() && n.find_first_not_of("0123456789") == std::string::npos,
               "device '", name, "': expected cpu, cuda or cuda:N");
    index = std::stoi(n);
  } else if (name != "cuda") {
    throw Error("device '" + name + "': expected cpu, cuda or cuda:N");
  }
  const int count = cuda_device_count();
  if (index >= count)
    throw Error("device '" + name + "' requested, but " +
                (count == 0 ? std::string("no CUDA device is usable in this process")
                            : std::to_string(count) + " CUDA device(s) are present"));
  return Device{DeviceKind::Cuda, index};
}

}  // namespace vllm
