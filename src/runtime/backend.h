// The backend interface: memory, copies, synchronisation and one virtual per kernel. The op
// front-ends (runtime/ops.h) validate arguments once and then call these, so a backend may
// assume shapes, dtypes and devices are consistent.
#pragma once
#include <cstddef>
#include <span>

#include "runtime/tensor.h"

namespace vllm {

struct RopeParams;
struct AttentionMeta;
struct MatmulFusion;
struct RopeCacheFusion;
struct HeadNorms;
struct MoeRouting;
struct MoePlan;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* ptr) = 0;
  // Copies between this backend's device and the host (or within the device). On return a
  // copy to the host is complete and the source of a copy from the host has been read (a
  // device may still be writing it out; its later work sees it).
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t bytes) = 0;
  virtual void synchronize() = 0;
  // Makes this backend's device the calling thread's current one (CUDA launches go to the
  // current device). Tensor-parallel ranks on several GPUs call it on every entry from their
  // threads; the CPU has nothing to do.
  virtual void make_current() {}

  // Step arena: between begin_arena and end_arena, alloc() hands out consecutive pieces of
  // one fixed buffer (freeing them is a no-op), so the same sequence of allocations gets the
  // same addresses every step, as graph replay needs. The pieces stay valid until the next
  // begin_arena. Backends without graphs ignore it.
  virtual void begin_arena(size_t /*bytes*/) {}
  virtual void end_arena() {}
  // Memory profiling (vLLM's profile run): between begin_profile and end_profile the backend
  // records the peak of its live allocations above what was live at begin_profile, and the
  // size a step arena would need for the same allocations (each piece 256-byte aligned, none
  // reused). Zeros where nothing is counted.
  struct MemoryProfile {
    int64_t peak_bytes = 0;
    int64_t arena_bytes = 0;
  };
  virtual void begin_profile() {}
  virtual MemoryProfile end_profile() { return {}; }
  // Hands freed memory the allocator keeps for reuse back to the device, so that a measure of
  // free device memory afterwards does not count it.
  virtual void release_cached_memory() {}
  // Graph capture: the work enqueued between begin_capture and end_capture is recorded, not
  // run, and replay() runs it again. Only where supports_graphs().
  virtual bool supports_graphs() const { return false; }
  virtual void begin_capture();
  virtual std::shared_ptr<void> end_capture();
  virtual void replay(const std::shared_ptr<void>& graph);

  // Kernels. Shapes are documented on the front-ends in runtime/ops.h.
  virtual void matmul(const Tensor& x, const Tensor& w, Tensor& out) = 0;
  // One matmul per head, unless the backend has a kernel for all of them.
  virtual void matmul_heads(const Tensor& x, const Tensor& w, Tensor& out);
  // Weight quantization at load on the device (--quantization fp8); accelerators only.
  virtual void quantize_fp8_weight(const Tensor& w, Tensor& dst, int64_t row0);
  virtual void round_fp8_per_tensor(Tensor& w);
  // out[t] = table[ids[t] - first_id], zeros where ids[t] is outside the table's rows.
  virtual void embedding(const Tensor& ids, const Tensor& table, int64_t first_id,
                         Tensor& out) = 0;
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) = 0;
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void add_bias(Tensor& x, const Tensor& bias) = 0;
  virtual void rope(Tensor& x, const Tensor& positions, const RopeParams& params) = 0;
  virtual void silu_and_mul(const Tensor& gate_up, Tensor& out) = 0;
  virtual void gelu_tanh_and_mul(const Tensor& gate_up, Tensor& out) = 0;
  virtual void gelu_tanh_f16_and_mul(const Tensor& gate_up, Tensor& out) = 0;
  virtual void scale(Tensor& x, float s) = 0;
  virtual void fill(Tensor& x, float value) = 0;
  virtual void copy_strided(const Tensor& src, Tensor& dst) = 0;
  virtual void index_add_scaled(const Tensor& src, const Tensor& rows, const Tensor& weights,
                                Tensor& out) = 0;
  // Mixture-of-experts ops (runtime/ops.h); backends without them throw.
  virtual void moe_route(const Tensor& scores, const Tensor& bias, const MoeRouting& r,
                         Tensor& ids, Tensor& weights, Tensor& margins);
  virtual void moe_align(const Tensor& ids, int num_experts, MoePlan& plan);
  // Default: moe_route, then moe_align.
  virtual void moe_route_align(const Tensor& scores, const Tensor& bias, const MoeRouting& r,
                               Tensor& ids, Tensor& weights, Tensor& margins, int num_experts,
                               MoePlan& plan);
  // silu_output: out = silu_and_mul(product), half its width (moe_matmul_silu).
  virtual void moe_matmul(const Tensor& x, const Tensor& rows, const Tensor& w,
                          const MoePlan& plan, bool silu_output, Tensor& out);
  virtual void moe_combine(const Tensor& y, const Tensor& ids, const Tensor& weights,
                           const MoePlan& plan, const Tensor& extra, bool accumulate,
                           Tensor& out);
  virtual void mla_prefill_attention(const Tensor& q, const Tensor& cache,
                                     const AttentionMeta& meta, int seq, int v_dim, float scale,
                                     int sliding_window, Tensor& out);
  virtual void softmax(const Tensor& x, Tensor& out) = 0;
  virtual void reshape_and_cache(const Tensor& k, const Tensor& v, Tensor& k_cache,
                                 Tensor& v_cache, const Tensor& slot_mapping) = 0;
  virtual void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                               const AttentionMeta& meta, float scale, int sliding_window,
                               Tensor& out) = 0;
  // Fused kernels. Each returns false, having done nothing, when this backend has no fused
  // kernel for its arguments; the front-end then runs the plain ops.
  virtual bool matmul_fused(const Tensor& /*x*/, const Tensor& /*w*/, Tensor& /*out*/,
                            const MatmulFusion& /*fusion*/) {
    return false;
  }
  // norms: the heads' RMS norms first (qk_norm_rope_and_cache), or nullptr.
  virtual bool rope_and_cache(Tensor& /*qk*/, const Tensor& /*positions*/,
                              const RopeParams& /*params*/, const Tensor& /*k*/,
                              const Tensor& /*v*/, Tensor& /*k_cache*/, Tensor& /*v_cache*/,
                              const Tensor& /*slot_mapping*/, const HeadNorms* /*norms*/) {
    return false;
  }
  virtual bool mla_rope_and_cache(Tensor& /*latent*/, const Tensor& /*norm_weight*/,
                                  float /*eps*/, const Tensor& /*q_pe_in*/,
                                  Tensor& /*q_pe_out*/, Tensor& /*k_pe*/,
                                  const Tensor& /*positions*/, const RopeParams& /*params*/,
                                  Tensor& /*c_cache*/, Tensor& /*pe_cache*/,
                                  const Tensor& /*slot_mapping*/) {
    return false;
  }
  // out[R] (i32) = index of the largest element of each row of x[R, C]; ties: lowest index.
  virtual void argmax_rows(const Tensor& x, Tensor& out) = 0;
  // out[R] (i32) = a token drawn from each row of logits[R, V] by params[R, 4] (temperature,
  // top_p, min_p, uniform u in [0, 1)) and top_k[R] (i32, <= 0 off); see ops.h. Accelerators
  // only: on the CPU the host sampler (model/sampler.h) reads the logits where they are.
  virtual void sample_rows(const Tensor& logits, const Tensor& params, const Tensor& top_k,
                           Tensor& out);
};

// The backend serving `device`; throws if that backend is not compiled in or not present.
Backend& backend_for(Device device);

}  // namespace vllm
