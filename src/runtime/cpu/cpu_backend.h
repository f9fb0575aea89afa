// The CPU backend: aligned host memory and kernels parallelised over the CPU thread pool.
// Kernel bodies live in one file per op family (matmul.cpp, attention.cpp, elementwise.cpp).
#pragma once
#include "runtime/backend.h"

namespace vllm::cpu {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return kCpu; }
  void* alloc(size_t bytes) override;
  void free(void* ptr) override;
  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            size_t bytes) override;
  void synchronize() override {}

  void matmul(const Tensor& x, const Tensor& w, Tensor& out) override;
  bool matmul_fused(const Tensor& x, const Tensor& w, Tensor& out,
                    const MatmulFusion& fusion) override;
  void embedding(const Tensor& ids, const Tensor& table, int64_t first_id,
                 Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override;
  void add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void add_bias(Tensor& x, const Tensor& bias) override;
  void rope(Tensor& x, const Tensor& positions, const RopeParams& params) override;
  void silu_and_mul(const Tensor& gate_up, Tensor& out) override;
  void gelu_tanh_and_mul(const Tensor& gate_up, Tensor& out) override;
  void gelu_tanh_f16_and_mul(const Tensor& gate_up, Tensor& out) override;
  void scale(Tensor& x, float s) override;
  void fill(Tensor& x, float value) override;
  void copy_strided(const Tensor& src, Tensor& dst) override;
  void index_add_scaled(const Tensor& src, const Tensor& rows, const Tensor& weights,
                        Tensor& out) override;
  void softmax(const Tensor& x, Tensor& out) override;
  void reshape_and_cache(const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                         const Tensor& slot_mapping) override;
  void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const AttentionMeta& meta, float scale, int sliding_window,
                       Tensor& out) override;
  void argmax_rows(const Tensor& x, Tensor& out) override;
};

CpuBackend& cpu_backend();

}  // namespace vllm::cpu
