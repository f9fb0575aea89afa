// Weight access by Hugging Face tensor name, whatever the file format, and the Linear layer
// that owns one or more projections fused along the output dim.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace vllm {

struct RopeParams;
struct ModelConfig;

class GgufFile;
class SafetensorsModel;

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The tensor stored under the HF name `name` (e.g. "model.layers.0.mlp.up_proj.weight").
  virtual std::optional<Tensor> get(const std::string& name) const = 0;
  Tensor require(const std::string& name) const;
  virtual std::string describe() const = 0;
};

std::unique_ptr<WeightSource> make_safetensors_source(std::shared_ptr<SafetensorsModel> st);
// GGUF tensors under their HF names (llama.cpp's naming translated; the config says which
// layers' post_attention_layernorm is the MLP's input norm, as in Llama, or a post-norm).
std::unique_ptr<WeightSource> make_gguf_source(std::shared_ptr<GgufFile> gguf,
                                               const ModelConfig& config);

// A contiguous f32 copy (norm weights and biases are used in f32), on `device`.
Tensor to_f32(const Tensor& t, Device device = kCpu);
// Where weights go, and the type they are computed in there (`--dtype`).
struct WeightPlacement {
  Device device = kCpu;
  // On a device: the type every matmul and embedding weight takes (f32, f16 or bf16); unset
  // (auto): float types keep theirs and block types become bf16. On the CPU it must be unset:
  // weights are used as stored (block types stay quantized).
  std::optional<DType> dtype;
  // --quantization fp8: the float weights of Linear::fused are quantized to FP8 with one scale
  // per tensor (model/quantization.h), as vLLM's per-tensor recipe; on a GPU that keeps FP8
  // weights (--dtype auto or bfloat16) this happens there (ops.h, quantize_fp8_weight). The
  // decoder sets it for its projections, not the router.
  bool quantize_fp8 = false;
  WeightPlacement(Device d = kCpu, std::optional<DType> dt = std::nullopt);  // NOLINT: implicit
  DType compute_dtype(DType stored) const;
  // Whether FP8_E4M3 matmul weights with one scale a row stay FP8 here (a GPU computing in
  // bf16), rather than widened as compute_dtype says.
  bool keeps_fp8() const;
};
// `t` ready for matmul / embedding: the same tensor on the CPU, else a device copy in
// compute_dtype().
Tensor place_weight(const Tensor& t, const WeightPlacement& where);
// The same for `t` derived in f32 from a weight stored as `stored` (a transposed slice, say):
// on a device it takes compute_dtype(stored), not f32's.
Tensor place_weight(const Tensor& t, const WeightPlacement& where, DType stored);

// A packed host copy of columns [begin, begin + length) of the 2-D host tensor w (block types:
// whole blocks of each row; the bounds must fall on block boundaries).
Tensor copy_columns(const Tensor& w, int64_t begin, int64_t length);

// Whether one expert projection `w` (host, [n, K]) stacks as FP8 under `where`: on a GPU that
// keeps FP8 (keeps_fp8), an FP8_E4M3 weight with one scale a row, or a float weight that
// --quantization fp8 (where.quantize_fp8) quantizes there (K a multiple of 32).
bool stacks_as_fp8(const Tensor& w, const WeightPlacement& where);

// [E, N, K]: expert e's rows are its parts[e] concatenated (each [n_i, K], together N rows),
// converted straight from the host tensors. In compute_dtype(), or where expert 0's first part
// stacks_as_fp8 as FP8_E4M3, each expert in dtype.h's GPU layout (its N x K e4m3 bytes, then
// its N row scales): FP8 parts as stored, float parts quantized on the device with one scale
// a part (quantize_fp8_weight). Every part must stack as expert 0's.
Tensor stack_experts(const std::vector<std::vector<Tensor>>& parts, const WeightPlacement& where);

// Host memory for the weights a model copies (the fused projections; the rest stay mmap'd):
// one buffer on 2 MiB pages, handed out in pieces. Decode streams every weight each token, and
// on huge pages that costs a few TLB misses instead of one per 4 KiB page.
class HostWeightArena {
 public:
  explicit HostWeightArena(size_t bytes);
  // A contiguous tensor in the arena, or an ordinary allocation once the arena is full.
  Tensor take(std::span<const int64_t> shape, DType dtype);

 private:
  std::shared_ptr<void> buffer_;
  size_t bytes_ = 0, used_ = 0;
};

// y = x @ W^T (+ b), W the row-wise concatenation of `parts` when their dtypes allow it.
struct Linear {
  std::vector<Tensor> parts;  // [out_i, in]; one entry once fused
  Tensor bias;                // [out] f32, or undefined
  int64_t out_features = 0;

  // The fused copy of CPU weights comes from `arena` when one is given.
  static Linear fused(const std::vector<Tensor>& weights, const std::vector<Tensor>& biases,
                      const WeightPlacement& where = {}, HostWeightArena* arena = nullptr);
  void operator()(const Tensor& x, Tensor& out) const;
  // out = this(rms_norm(x) * norm_weight); scratch normed of x's shape.
  void normed(const Tensor& x, const Tensor& norm_weight, float eps, Tensor& normed,
              Tensor& out) const;
  // As normed, and normed holds rms_norm(x) * norm_weight afterwards in every case.
  void normed_keep(const Tensor& x, const Tensor& norm_weight, float eps, Tensor& normed,
                   Tensor& out) const;
  // out = silu_and_mul(this(rms_norm(x) * norm_weight)); scratch normed of x's shape and
  // product [M, out_features].
  void normed_silu(const Tensor& x, const Tensor& norm_weight, float eps, Tensor& normed,
                   Tensor& product, Tensor& out) const;
  // out = this(rms_norm(x) * norm_weight), then rope_and_cache over its q/k/v heads (see
  // rms_norm_matmul_rope_cache); scratch normed of x's shape.
  void normed_rope_cache(const Tensor& x, const Tensor& norm_weight, float eps, Tensor& normed,
                         Tensor& out, int q_heads, const Tensor& positions,
                         const RopeParams& params, Tensor& k_cache, Tensor& v_cache,
                         const Tensor& slot_mapping) const;
  // out += this(x); scratch product of out's shape.
  void accumulate(const Tensor& x, Tensor& product, Tensor& out) const;
};

}  // namespace vllm
