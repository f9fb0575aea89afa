// The CUDA backend: one device, one stream on which every kernel and copy is ordered, memory
// from a stream-ordered pool that caches freed blocks, and cuBLASLt for matmuls.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "runtime/backend.h"

struct CUstream_st;
struct cublasLtContext;

namespace vllm::cuda {

class CudaBackend final : public Backend {
 public:
  // cuda:index, on GPU `physical` (the same but with set_cuda_backends_per_gpu).
  CudaBackend(int index, int physical);
  ~CudaBackend() override;

  Device device() const override { return Device{DeviceKind::Cuda, index_}; }
  void* alloc(size_t bytes) override;
  void free(void* ptr) override;
  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            size_t bytes) override;
  void synchronize() override;
  void make_current() override;
  void begin_arena(size_t bytes) override;
  void end_arena() override;
  void begin_profile() override;
  MemoryProfile end_profile() override;
  void release_cached_memory() override;
  bool supports_graphs() const override { return true; }
  void begin_capture() override;
  std::shared_ptr<void> end_capture() override;
  void replay(const std::shared_ptr<void>& graph) override;

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
  void matmul_heads(const Tensor& x, const Tensor& w, Tensor& out) override;
  void quantize_fp8_weight(const Tensor& w, Tensor& dst, int64_t row0) override;
  void round_fp8_per_tensor(Tensor& w) override;
  void copy_strided(const Tensor& src, Tensor& dst) override;
  void index_add_scaled(const Tensor& src, const Tensor& rows, const Tensor& weights,
                        Tensor& out) override;
  void softmax(const Tensor& x, Tensor& out) override;
  void moe_route(const Tensor& scores, const Tensor& bias, const MoeRouting& r, Tensor& ids,
                 Tensor& weights, Tensor& margins) override;
  void moe_align(const Tensor& ids, int num_experts, MoePlan& plan) override;
  void moe_route_align(const Tensor& scores, const Tensor& bias, const MoeRouting& r,
                       Tensor& ids, Tensor& weights, Tensor& margins, int num_experts,
                       MoePlan& plan) override;
  void moe_matmul(const Tensor& x, const Tensor& rows, const Tensor& w, const MoePlan& plan,
                  bool silu_output, Tensor& out) override;
  void moe_combine(const Tensor& y, const Tensor& ids, const Tensor& weights,
                   const MoePlan& plan, const Tensor& extra, bool accumulate,
                   Tensor& out) override;
  void mla_prefill_attention(const Tensor& q, const Tensor& cache, const AttentionMeta& meta,
                             int seq, int v_dim, float scale, int sliding_window,
                             Tensor& out) override;
  void reshape_and_cache(const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                         const Tensor& slot_mapping) override;
  bool rope_and_cache(Tensor& qk, const Tensor& positions, const RopeParams& params,
                      const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                      const Tensor& slot_mapping, const HeadNorms* norms) override;
  bool mla_rope_and_cache(Tensor& latent, const Tensor& norm_weight, float eps,
                          const Tensor& q_pe_in, Tensor& q_pe_out, Tensor& k_pe,
                          const Tensor& positions, const RopeParams& params, Tensor& c_cache,
                          Tensor& pe_cache, const Tensor& slot_mapping) override;
  void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const AttentionMeta& meta, float scale, int sliding_window,
                       Tensor& out) override;
  void argmax_rows(const Tensor& x, Tensor& out) override;
  void sample_rows(const Tensor& logits, const Tensor& params, const Tensor& top_k,
                   Tensor& out) override;

  CUstream_st* stream() const { return stream_; }
  int multiprocessors() const { return multiprocessors_; }

 private:
  // Host-to-device copies of weights (1 MiB and more) pass through pinned buffers: several
  // threads read the source (often a memory-mapped file) into one buffer while the DMA of the
  // previous one runs. Made at the first such copy; release_cached_memory frees it.
  struct UploadStage;
  void staged_upload(void* dst, const void* src, size_t bytes);
  std::mutex stage_mutex_;
  std::unique_ptr<UploadStage> stage_;

  struct GemmPlan;  // cuBLASLt descriptors and the chosen algorithm for one problem
  // m, n, k, weight dtype, x row stride, out row stride, out dtype.
  using GemmKey = std::tuple<int64_t, int64_t, int64_t, int, int64_t, int64_t, int>;
  // The cached plan for key (made on first use; null for an FP8 shape cuBLASLt has no
  // algorithm for); the cache is emptied when it reaches
  // kMaxGemmPlans, so that a long-running server's distinct prefill shapes cannot grow it.
  std::shared_ptr<const GemmPlan> gemm_plan(const GemmKey& key);
  static constexpr size_t kMaxGemmPlans = 4096;
  // The GEMV where it applies, else cuBLASLt; false (nothing done) for a fusion neither has.
  bool run_matmul(const Tensor& x, const Tensor& w, Tensor& out, const MatmulFusion& fusion);
  void gemm(const Tensor& x, const Tensor& w, Tensor& out, float beta);
  // x [M, K] f32 as a new tensor of the weights' 16-bit type, RMS-normed by norm_weight if given.
  Tensor to_weight_type(const Tensor& x, DType type, const Tensor* norm_weight, float eps);
  // FP8_E4M3 weights (device layout) where the GEMV does not apply: W8A8 through cuBLASLt
  // (x quantized per token), or a bf16 copy of the weights where cuBLASLt has no FP8 algorithm.
  bool matmul_fp8(const Tensor& x, const Tensor& w, Tensor& out, const MatmulFusion& fusion);
  Tensor dequantize_fp8(const Tensor& w);
  int fp8_absmax_blocks(int64_t n) const;  // blocks of the per-tensor FP8 max over n values
  // The rotation and cache write of a rope fusion, over a finished q/k/v product.
  void rope_cache_after(Tensor& qkv, const RopeCacheFusion& rc);
  // out = Act(gate_up[:, :F]) * gate_up[:, F:] (elementwise.cu).
  template <typename Act>
  void act_and_mul(const Tensor& gate_up, Tensor& out);

  int index_;
  int physical_;
  int multiprocessors_ = 0;
  CUstream_st* stream_ = nullptr;
  cublasLtContext* lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  // The step arena: one buffer, grown only while no graph refers into it.
  char* arena_ = nullptr;
  size_t arena_bytes_ = 0, arena_used_ = 0;
  bool arena_active_ = false;
  int graphs_alive_ = 0;
  // Profiling: the pool's use at begin_profile, and the arena the allocations since would take.
  bool profiling_ = false;
  uint64_t profile_base_ = 0;
  size_t profile_arena_ = 0;
  std::mutex plans_mutex_;
  std::map<GemmKey, std::shared_ptr<GemmPlan>> plans_;  // shared_ptr: GemmPlan is opaque here
};

}  // namespace vllm::cuda
