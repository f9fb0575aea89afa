#include "model/weights.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <regex>

#include "loader/gguf.h"
#include "loader/safetensors.h"
#include "model/config.h"
#include "model/quantization.h"
#include "runtime/cpu/quant.h"
#include "runtime/backend.h"
#include "runtime/ops.h"
#include "util/check.h"

namespace vllm {

Tensor WeightSource::require(const std::string& name) const {
  auto t = get(name);
  if (!t) throw Error(describe() + ": missing tensor " + name);
  return *t;
}

namespace {

class SafetensorsSource final : public WeightSource {
 public:
  explicit SafetensorsSource(std::shared_ptr<SafetensorsModel> st) : st_(std::move(st)) {}
  std::optional<Tensor> get(const std::string& name) const override {
    if (!st_->has(name)) return std::nullopt;
    return st_->tensor(name);
  }
  std::string describe() const override { return "safetensors checkpoint"; }

 private:
  std::shared_ptr<SafetensorsModel> st_;
};

class GgufSource final : public WeightSource {
 public:
  GgufSource(std::shared_ptr<GgufFile> g, std::vector<bool> pre_norm)
      : g_(std::move(g)), pre_norm_(std::move(pre_norm)) {}
  std::optional<Tensor> get(const std::string& name) const override {
    if (auto expert = expert_view(name)) return expert;
    const std::string gguf_name = translate(name);
    if (gguf_name.empty() || !g_->find(gguf_name)) return std::nullopt;
    return g_->tensor(gguf_name);
  }
  std::string describe() const override { return g_->path(); }

 private:
  // One expert's matrix of a GGUF expert stack (blk.N.ffn_{gate,up,down}_exps [E, rows,
  // cols]): a view of its rows, still in the file's block type.
  std::optional<Tensor> expert_view(const std::string& hf) const {
    static const std::regex kExpert(
        R"(model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight)");
    std::smatch m;
    if (!std::regex_match(hf, m, kExpert)) return std::nullopt;
    const std::string stack = "blk." + m[1].str() + ".ffn_" + m[3].str() + "_exps.weight";
    if (!g_->find(stack)) return std::nullopt;
    const Tensor all = g_->tensor(stack);
    const int64_t e = std::stoll(m[2].str());
    VLLM_CHECK(all.ndim() == 3, stack, " is ", all.shape_str(), ", not [experts, rows, cols]");
    if (e >= all.size(0)) return std::nullopt;
    return all.narrow(e, 1).reshape({all.size(1), all.size(2)});
  }

  std::string translate(const std::string& hf) const {
    static const std::pair<const char*, const char*> kGlobal[] = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
    };
    for (auto [from, to] : kGlobal)
      if (hf == from) return to;
    static const std::pair<const char*, const char*> kLayer[] = {
        {"input_layernorm", "attn_norm"},       {"pre_feedforward_layernorm", "ffn_norm"},
        {"post_feedforward_layernorm", "post_ffw_norm"},
        {"self_attn.q_proj", "attn_q"},         {"self_attn.k_proj", "attn_k"},
        {"self_attn.v_proj", "attn_v"},         {"self_attn.o_proj", "attn_output"},
        {"self_attn.q_norm", "attn_q_norm"},    {"self_attn.k_norm", "attn_k_norm"},
        {"mlp.gate_proj", "ffn_gate"},          {"mlp.up_proj", "ffn_up"},
        {"mlp.down_proj", "ffn_down"},
        // MLA (deepseek2): kv_b_proj comes split per head in current files (k_b_proj,
        // v_b_proj are our names for those halves, see DecoderModel::load_mla).
        {"self_attn.q_a_proj", "attn_q_a"},     {"self_attn.q_a_layernorm", "attn_q_a_norm"},
        {"self_attn.q_b_proj", "attn_q_b"},     {"self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa"},
        {"self_attn.kv_a_layernorm", "attn_kv_a_norm"},
        {"self_attn.kv_b_proj", "attn_kv_b"},   {"self_attn.k_b_proj", "attn_k_b"},
        {"self_attn.v_b_proj", "attn_v_b"},
        // Mixture of experts: the router, V3's correction bias, the shared experts.
        {"mlp.gate", "ffn_gate_inp"},
        {"mlp.shared_experts.gate_proj", "ffn_gate_shexp"},
        {"mlp.shared_experts.up_proj", "ffn_up_shexp"},
        {"mlp.shared_experts.down_proj", "ffn_down_shexp"},
    };
    static const std::regex kBias(R"(model\.layers\.(\d+)\.mlp\.gate\.e_score_correction_bias)");
    std::smatch b;
    if (std::regex_match(hf, b, kBias)) return "blk." + b[1].str() + ".exp_probs_b.bias";
    static const std::regex kPattern(R"(model\.layers\.(\d+)\.(.+)\.(weight|bias))");
    std::smatch m;
    if (!std::regex_match(hf, m, kPattern)) return {};
    if (m[2] == "post_attention_layernorm") {  // the MLP's input norm in pre-norm layers
      const size_t layer = std::stoul(m[1].str());
      const bool pre = layer >= pre_norm_.size() || pre_norm_[layer];
      return "blk." + m[1].str() + (pre ? ".ffn_norm." : ".post_attention_norm.") + m[3].str();
    }
    for (auto [from, to] : kLayer)
      if (m[2] == from) return "blk." + m[1].str() + "." + to + "." + m[3].str();
    return {};
  }

  std::shared_ptr<GgufFile> g_;
  std::vector<bool> pre_norm_;  // per layer: NormPlacement::kPre
};

}  // namespace

std::unique_ptr<WeightSource> make_safetensors_source(std::shared_ptr<SafetensorsModel> st) {
  return std::make_unique<SafetensorsSource>(std::move(st));
}

std::unique_ptr<WeightSource> make_gguf_source(std::shared_ptr<GgufFile> gguf,
                                               const ModelConfig& config) {
  std::vector<bool> pre_norm;
  for (const LayerSpec& L : config.layers) pre_norm.push_back(L.norm == NormPlacement::kPre);
  return std::make_unique<GgufSource>(std::move(gguf), std::move(pre_norm));
}

Tensor to_f32(const Tensor& t, Device device) {
  VLLM_CHECK(t.is_contiguous() && t.device().kind == DeviceKind::Cpu, "to_f32 input");
  const std::vector<int64_t> shape = t.shape();
  Tensor out = Tensor::empty(std::span<const int64_t>(shape), DType::F32);
  cpu::dequantize_row(t.dtype(), t.raw(), out.data<float>(), t.numel());
  return device == kCpu ? out : out.to(device);
}

WeightPlacement::WeightPlacement(Device d, std::optional<DType> dt) : device(d), dtype(dt) {
  VLLM_CHECK(!dtype || *dtype == DType::F32 || *dtype == DType::F16 || *dtype == DType::BF16,
             "weights are computed in f32, f16 or bf16, not ", dtype_name(*dtype));
  if (dtype && device.kind == DeviceKind::Cpu)
    throw Error("--dtype " + std::string(dtype_name(*dtype)) +
                " is for GPUs: the CPU computes in the checkpoint's own types (use --dtype auto)");
}

DType WeightPlacement::compute_dtype(DType stored) const {
  if (device.kind == DeviceKind::Cpu) return stored;
  if (dtype) return *dtype;
  return dtype_info(stored).quantized ? DType::BF16 : stored;
}

bool WeightPlacement::keeps_fp8() const {
  return device.kind == DeviceKind::Cuda && (!dtype || *dtype == DType::BF16);
}

namespace {

// Writes host tensor `src` converted to `dtype` at device address `dst`, in pieces so that a
// dequantized copy never needs more than a few MiB of host memory at once.
void upload_as(const Tensor& src, DType dtype, void* dst, Device device) {
  Backend& be = backend_for(device);
  if (src.dtype() == dtype) {
    be.copy(dst, device, src.raw(), kCpu, static_cast<size_t>(src.nbytes()));
    return;
  }
  VLLM_CHECK(dtype == DType::BF16 || dtype == DType::F16 || dtype == DType::F32,
             "cannot convert ", dtype_name(src.dtype()), " to ", dtype_name(dtype));
  const int64_t cols = src.size(-1), rows = src.numel() / cols;
  const int64_t rows_per_piece = std::max<int64_t>(1, (int64_t(4) << 20) / cols);
  const size_t out_elem = dtype_info(dtype).block_bytes;
  std::vector<float> f(static_cast<size_t>(rows_per_piece * cols));
  std::vector<uint16_t> h(dtype == DType::F32 ? 0 : f.size());
  for (int64_t r = 0; r < rows; r += rows_per_piece) {
    const int64_t n = std::min(rows_per_piece, rows - r) * cols;
    cpu::dequantize_row(src.dtype(), src.row(r), f.data(), n);
    const void* piece = f.data();
    if (dtype != DType::F32) {
      f32_to_16bit(dtype, f.data(), h.data(), n);
      piece = h.data();
    }
    be.copy(static_cast<char*>(dst) + r * cols * out_elem, device, piece, kCpu,
            static_cast<size_t>(n) * out_elem);
  }
}

// Whether every row of the host FP8_E4M3 tensor w has one scale in all its blocks (per-tensor
// and per-channel checkpoints, --quantization fp8; not 2-D block scales across a row).
bool fp8_rows_uniform(const Tensor& w) {
  if (w.dtype() != DType::FP8_E4M3 || w.ndim() != 2 || !w.is_contiguous()) return false;
  const int64_t blocks = w.size(1) / kFp8Block;
  for (int64_t r = 0; r < w.size(0); ++r) {
    const auto* b = reinterpret_cast<const BlockFp8E4M3*>(w.row(r));
    for (int64_t j = 1; j < blocks; ++j)
      if (std::memcmp(&b[j].d, &b[0].d, sizeof(float)) != 0) return false;
  }
  return true;
}

// Writes the rows of host FP8_E4M3 `src` (one scale a row) as rows [row0, row0 + rows) of the
// device tensor at `dst`, `total` rows of K in all, in the device layout of an FP8_E4M3 matmul
// weight (runtime/cuda/gemv.cu reads it): the total x K e4m3 bytes row by row, then the total
// f32 row scales, then padding to the host tensor's size (K / 32 * 36 bytes a row). A row whose
// blocks disagree on the scale is an error (fp8_rows_uniform decides before; this guards parts
// that follow the one it was asked of).
void upload_fp8_rows(const Tensor& src, void* dst, int64_t row0, int64_t total, int64_t k,
                     Device device) {
  const int64_t rows = src.size(0), blocks = k / kFp8Block;
  VLLM_CHECK(src.dtype() == DType::FP8_E4M3 && src.ndim() == 2 && src.is_contiguous() &&
                 src.size(1) == k && row0 + rows <= total,
             "FP8 rows ", src.shape_str(), " at row ", row0, " of ", total, "x", k);
  const int64_t rows_per_piece = std::max<int64_t>(1, (int64_t(4) << 20) / k);
  std::vector<uint8_t> piece(static_cast<size_t>(std::min(rows, rows_per_piece) * k));
  std::vector<float> scales(static_cast<size_t>(rows));
  for (int64_t r0 = 0; r0 < rows; r0 += rows_per_piece) {
    const int64_t n = std::min(rows_per_piece, rows - r0);
    for (int64_t r = 0; r < n; ++r) {
      const auto* b = reinterpret_cast<const BlockFp8E4M3*>(src.row(r0 + r));
      uint8_t* out = piece.data() + r * k;
      for (int64_t j = 0; j < blocks; ++j) {
        VLLM_CHECK(std::memcmp(&b[j].d, &b[0].d, sizeof(float)) == 0, "FP8 weight row ", r0 + r,
                   " of ", src.shape_str(), " has more than one scale");
        std::memcpy(out + j * kFp8Block, b[j].qs, kFp8Block);
      }
      scales[static_cast<size_t>(r0 + r)] = b[0].d;
    }
    backend_for(device).copy(static_cast<char*>(dst) + (row0 + r0) * k, device, piece.data(),
                             kCpu, static_cast<size_t>(n * k));
  }
  backend_for(device).copy(static_cast<char*>(dst) + total * k + row0 * int64_t(sizeof(float)),
                           device, scales.data(), kCpu, scales.size() * sizeof(float));
}

// Whether `weights` are quantized on the device under `where` (quantize_fp8 on a GPU that
// keeps FP8): float types, rows of whole 32-blocks. Otherwise they are quantized on the host.
bool quantizes_on_device(const std::vector<Tensor>& weights, const WeightPlacement& where) {
  return where.quantize_fp8 && where.keeps_fp8() &&
         std::all_of(weights.begin(), weights.end(), [](const Tensor& w) {
           const DType t = w.dtype();
           return w.ndim() == 2 && w.is_contiguous() && w.size(1) % kFp8Block == 0 &&
                  (t == DType::F32 || t == DType::F16 || t == DType::BF16);
         });
}

// `weights` quantized on the host as `where` asks (unchanged without quantize_fp8).
std::vector<Tensor> host_quantized(const std::vector<Tensor>& weights,
                                   const WeightPlacement& where) {
  if (!where.quantize_fp8) return weights;
  std::vector<Tensor> out;
  out.reserve(weights.size());
  for (const Tensor& w : weights) out.push_back(quantize_fp8_per_tensor(w));
  return out;
}

}  // namespace

Tensor place_weight(const Tensor& t, const WeightPlacement& where) {
  return place_weight(t, where, t.dtype());
}

Tensor place_weight(const Tensor& t, const WeightPlacement& where, DType stored) {
  const Device device = where.device;
  if (device.kind == DeviceKind::Cpu) return t;
  VLLM_CHECK(t.is_contiguous() && t.device().kind == DeviceKind::Cpu, "place_weight input");
  const std::vector<int64_t> shape = t.shape();
  Tensor out = Tensor::empty(std::span<const int64_t>(shape), where.compute_dtype(stored),
                             device);
  upload_as(t, out.dtype(), out.raw(), device);
  return out;
}

Tensor copy_columns(const Tensor& w, int64_t begin, int64_t length) {
  const DTypeInfo& d = dtype_info(w.dtype());
  VLLM_CHECK(w.ndim() == 2 && w.is_contiguous() && begin >= 0 && length >= 0 &&
                 begin % d.block_size == 0 && length % d.block_size == 0 &&
                 begin + length <= w.size(1),
             "columns ", begin, "+", length, " of ", w.shape_str(), " ", d.name);
  Tensor out = Tensor::empty({w.size(0), length}, w.dtype());
  const int64_t skip = row_bytes(w.dtype(), begin), bytes = row_bytes(w.dtype(), length);
  for (int64_t r = 0; r < w.size(0); ++r) std::memcpy(out.row(r), w.row(r) + skip, size_t(bytes));
  return out;
}

bool stacks_as_fp8(const Tensor& w, const WeightPlacement& where) {
  if (!where.keeps_fp8()) return false;
  return w.dtype() == DType::FP8_E4M3 ? fp8_rows_uniform(w) : quantizes_on_device({w}, where);
}

Tensor stack_experts(const std::vector<std::vector<Tensor>>& parts,
                     const WeightPlacement& where) {
  const Device device = where.device;
  VLLM_CHECK(!parts.empty() && !parts[0].empty(), "stack_experts without experts");
  const int64_t in = parts[0][0].size(1);
  int64_t rows = 0;
  for (const Tensor& w : parts[0]) rows += w.size(0);
  const bool fp8 = stacks_as_fp8(parts[0][0], where);
  const DType dt = fp8 ? DType::FP8_E4M3 : where.compute_dtype(parts[0][0].dtype());
  Tensor out = Tensor::empty({int64_t(parts.size()), rows, in}, dt, device);
  // Whether part w stacks as expert 0's first did (FP8 rows with one scale each are checked as
  // upload_fp8_rows copies them, not in a second pass here).
  const auto stacks = [&](const Tensor& w) {
    if (!fp8) return where.compute_dtype(w.dtype()) == dt;
    return w.dtype() == DType::FP8_E4M3 || quantizes_on_device({w}, where);
  };
  for (size_t e = 0; e < parts.size(); ++e) {
    Tensor slot = out.narrow(int64_t(e), 1).reshape({rows, in});
    int64_t row = 0;
    for (const Tensor& w : parts[e]) {
      VLLM_CHECK(w.ndim() == 2 && w.size(1) == in && row + w.size(0) <= rows &&
                     stacks(w),
                 "expert ", e, " weight ", w.shape_str(), " ", dtype_name(w.dtype()),
                 " does not stack with expert 0's");
      if (!fp8) {
        upload_as(w, dt, slot.row(row), device);
      } else if (w.dtype() == DType::FP8_E4M3) {
        upload_fp8_rows(w, slot.raw(), row, rows, in, device);
      } else {
        quantize_fp8_weight(w.to(device), slot, row);
      }
      row += w.size(0);
    }
    VLLM_CHECK(row == rows, "expert ", e, " has ", row, " rows, expert 0 has ", rows);
  }
  return out;
}

HostWeightArena::HostWeightArena(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  if (bytes == 0) return;
  bytes_ = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, bytes_);
  if (!p) throw std::bad_alloc();
  madvise(p, bytes_, MADV_HUGEPAGE);  // a hint: without THP the buffer is ordinary memory
  buffer_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

Tensor HostWeightArena::take(std::span<const int64_t> shape, DType dtype) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  const size_t need = static_cast<size_t>(row_bytes(dtype, shape.back()) * (n / shape.back()));
  const size_t at = (used_ + 63) / 64 * 64;
  if (!buffer_ || at + need > bytes_) return Tensor::empty(shape, dtype);
  used_ = at + need;
  return Tensor::from_blob(static_cast<char*>(buffer_.get()) + at, shape, dtype, buffer_);
}

Linear Linear::fused(const std::vector<Tensor>& stored, const std::vector<Tensor>& biases,
                     const WeightPlacement& where, HostWeightArena* arena) {
  const Device device = where.device;
  VLLM_CHECK(!stored.empty(), "Linear without weights");
  const bool quantize_here = quantizes_on_device(stored, where);
  const std::vector<Tensor> weights = quantize_here ? stored : host_quantized(stored, where);
  Linear lin;
  const int64_t in = weights[0].size(1);
  bool same_dtype = true;
  for (const Tensor& w : weights) {
    VLLM_CHECK(w.ndim() == 2 && w.size(1) == in, "fused weights disagree: ", w.shape_str());
    same_dtype &= w.dtype() == weights[0].dtype();
    lin.out_features += w.size(0);
  }
  // On a GPU (--dtype auto or bfloat16), FP8 weights with one scale a row stay FP8 in the
  // device layout (upload_fp8_rows; used whole, never sliced): half the bytes of bf16,
  // dequantized by the kernels that read them. Others are widened as compute_dtype says.
  const bool keep_fp8 =
      where.keeps_fp8() && std::all_of(weights.begin(), weights.end(), [](const Tensor& w) {
        return w.dtype() == DType::FP8_E4M3 && fp8_rows_uniform(w);
      });
  if (quantize_here) {  // each part sent as stored, quantized into its rows there
    Tensor f = Tensor::empty({lin.out_features, in}, DType::FP8_E4M3, device);
    int64_t row = 0;
    for (const Tensor& w : weights) {
      quantize_fp8_weight(w.to(device), f, row);
      row += w.size(0);
    }
    lin.parts = {f};
  } else if (keep_fp8) {
    Tensor f = Tensor::empty({lin.out_features, in}, DType::FP8_E4M3, device);
    int64_t row = 0;
    for (const Tensor& w : weights) {
      upload_fp8_rows(w, f.raw(), row, lin.out_features, in, device);
      row += w.size(0);
    }
    lin.parts = {f};
  } else if (weights.size() == 1) {
    lin.parts = {place_weight(weights[0], where)};
  } else if (device.kind != DeviceKind::Cpu) {
    // Each part converted straight into its rows of the fused device tensor.
    const DType dt = where.compute_dtype(weights[0].dtype());
    Tensor f = Tensor::empty({lin.out_features, in}, dt, device);
    int64_t row = 0;
    for (const Tensor& w : weights) {
      VLLM_CHECK(where.compute_dtype(w.dtype()) == dt, "fused weights of mixed dtypes");
      upload_as(w, dt, f.row(row), device);
      row += w.size(0);
    }
    lin.parts = {f};
  } else if (!same_dtype) {
    lin.parts = weights;
  } else {
    const int64_t shape[] = {lin.out_features, in};
    Tensor f = arena ? arena->take(shape, weights[0].dtype())
                     : Tensor::empty(shape, weights[0].dtype());
    char* dst = static_cast<char*>(f.raw());
    for (const Tensor& w : weights) {
      std::memcpy(dst, w.raw(), static_cast<size_t>(w.nbytes()));
      dst += w.nbytes();
    }
    lin.parts = {f};
  }
  if (!biases.empty()) {
    VLLM_CHECK(biases.size() == weights.size(), "one bias per fused weight");
    Tensor bias = Tensor::empty({lin.out_features}, DType::F32);
    float* dst = bias.data<float>();
    for (const Tensor& b : biases) {
      cpu::dequantize_row(b.dtype(), b.raw(), dst, b.numel());
      dst += b.numel();
    }
    lin.bias = device == kCpu ? bias : bias.to(device);
  }
  return lin;
}

void Linear::operator()(const Tensor& x, Tensor& out) const {
  if (parts.size() == 1) {
    matmul(x, parts[0], out);
  } else {
    int64_t off = 0;
    for (const Tensor& w : parts) {
      Tensor slice = out.slice(1, off, w.size(0));
      matmul(x, w, slice);
      off += w.size(0);
    }
  }
  if (bias.defined()) add_bias(out, bias);
}

// The fused ops take one weight; split weights and biases go through the plain ops.
namespace {

using NormedMatmul = void (*)(const Tensor&, const Tensor&, float, const Tensor&, Tensor&,
                              Tensor&);

// lin(rms_norm(x) * norm_weight) through `op` (rms_norm_matmul or its _keep form) where lin is
// one weight, else the plain ops.
void project_normed(const Linear& lin, NormedMatmul op, const Tensor& x,
                    const Tensor& norm_weight, float eps, Tensor& normed, Tensor& out) {
  if (lin.parts.size() != 1) {
    rms_norm(x, norm_weight, eps, normed);
    lin(normed, out);
    return;
  }
  op(x, norm_weight, eps, lin.parts[0], normed, out);
  if (lin.bias.defined()) add_bias(out, lin.bias);
}

}  // namespace

void Linear::normed(const Tensor& x, const Tensor& norm_weight, float eps, Tensor& normed,
                    Tensor& out) const {
  project_normed(*this, rms_norm_matmul, x, norm_weight, eps, normed, out);
}

void Linear::normed_keep(const Tensor& x, const Tensor& norm_weight, float eps, Tensor& normed,
                         Tensor& out) const {
  project_normed(*this, rms_norm_matmul_keep, x, norm_weight, eps, normed, out);
}

void Linear::normed_silu(const Tensor& x, const Tensor& norm_weight, float eps, Tensor& normed,
                         Tensor& product, Tensor& out) const {
  if (parts.size() != 1 || bias.defined()) {
    this->normed(x, norm_weight, eps, normed, product);
    silu_and_mul(product, out);
    return;
  }
  rms_norm_matmul_silu(x, norm_weight, eps, parts[0], normed, product, out);
}

void Linear::normed_rope_cache(const Tensor& x, const Tensor& norm_weight, float eps,
                               Tensor& normed, Tensor& out, int q_heads,
                               const Tensor& positions, const RopeParams& params,
                               Tensor& k_cache, Tensor& v_cache,
                               const Tensor& slot_mapping) const {
  if (parts.size() != 1 || bias.defined()) {
    this->normed(x, norm_weight, eps, normed, out);
    QkvHeads h = split_qkv(out, q_heads, int(k_cache.size(2)), int(k_cache.size(3)));
    rope_and_cache(h.qk, positions, params, h.k, h.v, k_cache, v_cache, slot_mapping);
    return;
  }
  rms_norm_matmul_rope_cache(x, norm_weight, eps, parts[0], normed, out, q_heads, positions,
                             params, k_cache, v_cache, slot_mapping);
}

void Linear::accumulate(const Tensor& x, Tensor& product, Tensor& out) const {
  if (parts.size() != 1 || bias.defined()) {
    (*this)(x, product);
    add(out, product, out);
    return;
  }
  matmul_add(x, parts[0], product, out);
}

}  // namespace vllm
