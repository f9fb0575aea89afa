#include "model/decoder.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <numeric>
#include <span>

#include "model/quantization.h"
#include "model/tensor_parallel.h"
#include "runtime/backend.h"
#include "runtime/ops.h"
#include "util/check.h"

namespace vllm {
namespace {

Tensor host_i32(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::I32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

// The q/k/v (or gate/up) projections of a layer: one fused tensor where the checkpoint stores
// them fused (Phi-3's qkv_proj, gate_up_proj), else the separate ones in output order.
std::vector<Tensor> projection(const WeightSource& w, const std::string& prefix,
                               const char* fused, std::initializer_list<const char*> parts,
                               const char* suffix) {
  if (auto t = w.get(prefix + fused + suffix)) return {*t};
  std::vector<Tensor> out;
  for (const char* n : parts) out.push_back(w.require(prefix + n + suffix));
  return out;
}

std::vector<Tensor> qkv_weights(const WeightSource& w, const std::string& p, const char* suffix) {
  return projection(w, p, "self_attn.qkv_proj",
                    {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, suffix);
}

// The projections a layer applies to its normed input, in output order: q, k, v, or for MLA
// the query's (q_proj, or q_a_proj with a q-LoRA) and kv_a_proj_with_mqa.
std::vector<Tensor> attention_input_weights(const WeightSource& w, const std::string& p,
                                            const LayerSpec& spec) {
  if (spec.attention == AttentionType::kMla) {
    auto q = w.get(p + "self_attn.q_proj.weight");
    return {q ? *q : w.require(p + "self_attn.q_a_proj.weight"),
            w.require(p + "self_attn.kv_a_proj_with_mqa.weight")};
  }
  return qkv_weights(w, p, ".weight");
}

std::vector<Tensor> gate_up_weights(const WeightSource& w, const std::string& p,
                                    const char* mlp = "mlp.") {
  const std::string m = mlp;
  return projection(w, p, (m + "gate_up_proj").c_str(),
                    {(m + "gate_proj").c_str(), (m + "up_proj").c_str()}, ".weight");
}

std::string layer_prefix(int i) { return "model.layers." + std::to_string(i) + "."; }

std::vector<Tensor> expert_gate_up_weights(const WeightSource& w, const std::string& p, int e) {
  const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
  return {w.require(x + "gate_proj.weight"), w.require(x + "up_proj.weight")};
}

// The weights a CPU layer keeps as fused copies: the attention's input projections, and
// gate/up (of each expert, and of the shared experts).
std::vector<std::vector<Tensor>> fused_parts(const WeightSource& w, int i, const LayerSpec& spec,
                                             const MoeSpec& moe) {
  const std::string p = layer_prefix(i);
  std::vector<std::vector<Tensor>> out;
  out.push_back(attention_input_weights(w, p, spec));
  if (spec.mlp == MlpType::kMoe) {
    for (int e = 0; e < moe.num_experts; ++e) out.push_back(expert_gate_up_weights(w, p, e));
    if (moe.shared_intermediate_size > 0) out.push_back(gate_up_weights(w, p, "mlp.shared_experts."));
  } else {
    out.push_back(gate_up_weights(w, p));
  }
  return out;
}

// t's values after quantize_fp8_per_tensor, in t's own float type (rounded to it).
Tensor fp8_values(const Tensor& t) {
  Tensor f = to_f32(quantize_fp8_per_tensor(t));
  if (t.dtype() == DType::F32) return f;
  const std::vector<int64_t> shape = t.shape();
  Tensor out = Tensor::empty(std::span<const int64_t>(shape), t.dtype());
  f32_to_16bit(t.dtype(), f.data<float>(), static_cast<uint16_t*>(out.raw()), f.numel());
  return out;
}

}  // namespace

DecoderModel::DecoderModel(ModelConfig config, const WeightSource& w, const Progress& on_layer,
                           Device device, std::shared_ptr<Communicator> comm)
    : config_(std::move(config)), device_(device), placement_(device, config_.dtype),
      projections_(placement_) {
  const ModelConfig& c = config_;
  projections_.quantize_fp8 = c.quantize_fp8;
  backend_for(device).make_current();  // this rank's weights go to its own GPU
  if (comm && comm->size() > 1) comm_ = std::move(comm);
  VLLM_CHECK(static_cast<int>(c.layers.size()) == c.num_layers, "one layer spec per layer");
  for (const LayerSpec& spec : c.layers) {
    if (c.rope_ggml_theta && spec.rope.scaling.type == "yarn" && device.kind != DeviceKind::Cpu)
      throw Error("YaRN RoPE scaling in a GGUF file runs on the CPU only so far (--device cpu)");
  }
  const Tensor embed = w.require("model.embed_tokens.weight");
  VLLM_CHECK(embed.size(0) == c.vocab_size && embed.size(1) == c.hidden_size,
             "embed_tokens shape ", embed.shape_str());
  final_norm = norm_weight(w, "model.norm.weight", c.hidden_size);
  auto head = w.get("lm_head.weight");
  const bool tied = !head || c.tie_word_embeddings;
  if (comm_) {  // vocab-parallel embedding and LM head: this rank's rows of each
    const Share rows = share_of(c.vocab_size, {comm_->rank(), comm_->size()});
    embed_tokens = place_weight(embed.narrow(rows.begin, rows.length), placement_);
    lm_head = tied ? embed_tokens : place_weight(head->narrow(rows.begin, rows.length), placement_);
  } else {
    embed_tokens = place_weight(embed, placement_);
    lm_head = tied ? embed_tokens : place_weight(*head, placement_);
  }
  if (c.kv_cache_f16)
    kv_dtype_ = DType::F16;
  else if (device.kind != DeviceKind::Cpu && embed_tokens.dtype() != DType::F32)
    kv_dtype_ = embed_tokens.dtype();

  // The fused q/k/v and gate/up copies of CPU weights share one huge-page buffer.
  size_t fused_bytes = 0;
  if (device.kind == DeviceKind::Cpu)
    for (int i = 0; i < c.num_layers; ++i)
      for (const auto& parts : fused_parts(w, i, c.layers[i], c.moe)) {
        if (parts.size() < 2) continue;
        if (std::all_of(parts.begin(), parts.end(),
                        [&](const Tensor& t) { return t.dtype() == parts[0].dtype(); }))
          for (const Tensor& t : parts) {
            // --quantization fp8 fuses the parts' quantized copies
            const DType fused = c.quantize_fp8 ? fp8_quantized_dtype(t.size(1)) : t.dtype();
            fused_bytes += size_t(row_bytes(fused, t.size(1)) * t.size(0));
          }
        fused_bytes += 64;  // alignment of each fused tensor
      }
  HostWeightArena arena(fused_bytes);
  make_kv_cache_groups();

  layers_.reserve(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    layers_.push_back(load_layer(i, w, arena));
    if (on_layer) on_layer(i + 1, c.num_layers);
  }
}

Tensor DecoderModel::norm_weight(const WeightSource& w, const std::string& name,
                                 int64_t size) const {
  Tensor t = to_f32(w.require(name));
  VLLM_CHECK(t.numel() == size, name, " has ", t.numel(), " weights, the config needs ", size);
  if (config_.norm_weight_offset != 0.0)  // Gemma's (1 + w), added once here
    for (float& v : std::span<float>(t.data<float>(), size_t(t.numel())))
      v = static_cast<float>(config_.norm_weight_offset) + v;
  return device_ == kCpu ? t : t.to(device_);
}

RopeParams DecoderModel::rope_params(const LayerSpec& spec, const WeightSource& w) const {
  const ModelConfig& c = config_;
  RopeTables tables =
      compute_rope_tables(spec.rope, c.head_dim, c.max_position_embeddings, c.max_model_len);
  RopeParams r;
  r.inv_freq = std::move(tables.inv_freq);
  r.mscale = tables.mscale;
  r.head_dim = c.head_dim;
  r.rotary_dim = spec.rotary_dim(c.head_dim);
  r.neox = c.rope_neox;
  if (c.rope_ggml_theta) {
    r.ggml_theta = true;
    r.theta_scale = std::pow(static_cast<float>(spec.rope.theta), -2.0f / r.rotary_dim);
    const RopeScaling& s = spec.rope.scaling;
    if (s.type == "linear" || s.type == "yarn") r.freq_scale = 1.0f / static_cast<float>(s.factor);
    if (s.type == "yarn") {  // ggml_rope_yarn_corr_dims, in floats as ggml has them
      const auto corr = [&](double rotations) {
        return float(r.rotary_dim) *
               std::log(float(s.original_max_position_embeddings) /
                        (static_cast<float>(rotations) * 2.0f * float(M_PI))) /
               (2.0f * std::log(static_cast<float>(spec.rope.theta)));
      };
      r.ext_factor = 1.0f;
      r.yarn_low = std::max(0.0f, std::floor(corr(s.beta_fast)));
      r.yarn_high = std::min(float(r.rotary_dim - 1), std::ceil(corr(s.beta_slow)));
    }
    // GGUF llama-3 files carry the llama3 scaling as per-frequency divisors.
    if (auto freqs = w.get("rope_freqs.weight")) {
      Tensor f = to_f32(*freqs);
      VLLM_CHECK(f.numel() == static_cast<int64_t>(r.inv_freq.size()), "rope_freqs size");
      r.freq_factors.assign(f.data<float>(), f.data<float>() + f.numel());
    }
  }
  return r;
}

DecoderModel::Layer DecoderModel::load_layer(int i, const WeightSource& w,
                                             HostWeightArena& arena) const {
  const ModelConfig& c = config_;
  const std::string p = layer_prefix(i);
  Layer L;
  L.spec = c.layers[i];
  const LayerSpec& spec = L.spec;
  L.rope = rope_params(spec, w);
  const int64_t h = c.hidden_size;
  switch (spec.norm) {
    case NormPlacement::kPre:
      L.attn_norm = norm_weight(w, p + "input_layernorm.weight", h);
      L.ffn_norm = norm_weight(w, p + "post_attention_layernorm.weight", h);
      break;
    case NormPlacement::kSandwich:
      L.attn_norm = norm_weight(w, p + "input_layernorm.weight", h);
      L.attn_post_norm = norm_weight(w, p + "post_attention_layernorm.weight", h);
      L.ffn_norm = norm_weight(w, p + "pre_feedforward_layernorm.weight", h);
      L.ffn_post_norm = norm_weight(w, p + "post_feedforward_layernorm.weight", h);
      break;
    case NormPlacement::kPost:
      L.attn_post_norm = norm_weight(w, p + "post_attention_layernorm.weight", h);
      L.ffn_post_norm = norm_weight(w, p + "post_feedforward_layernorm.weight", h);
      break;
  }
  std::vector<Tensor> qkv_bias;
  if (spec.attention_bias) qkv_bias = qkv_weights(w, p, ".bias");
  L.qkv = Linear::fused(attention_input_weights(w, p, spec), qkv_bias, projections_, &arena);
  if (spec.attention == AttentionType::kMla) {
    load_mla(L, p, w);
  } else {
    VLLM_CHECK(L.qkv.out_features == c.q_size() + 2 * c.kv_size(), "layer ", i,
               " q/k/v shapes do not match the config");
  }
  L.o = Linear::fused({w.require(p + "self_attn.o_proj.weight")}, {}, projections_);
  if (spec.mlp == MlpType::kMoe) {
    const MoeSpec& m = c.moe;
    L.router = Linear::fused({w.require(p + "mlp.gate.weight")}, {}, placement_);
    VLLM_CHECK(L.router.out_features == m.num_experts, "layer ", i, " router of ",
               L.router.out_features, " experts, the config has ", m.num_experts);
    if (m.score_correction_bias) {
      L.router_bias = to_f32(w.require(p + "mlp.gate.e_score_correction_bias"), device_);
      VLLM_CHECK(L.router_bias.numel() == m.num_experts, "layer ", i,
                 " e_score_correction_bias of ", L.router_bias.numel(), " experts");
    }
    const int64_t F = m.intermediate_size, S = m.shared_intermediate_size;
    // On a GPU the shared experts join the stacked routed ones (below) where they are whole
    // experts' widths; elsewhere they are one gate/up and one down projection.
    const bool shared_stacked = device_ != kCpu && S > 0 && S % F == 0;
    if (S > 0 && !shared_stacked) {
      L.shared_gate_up =
          Linear::fused(gate_up_weights(w, p, "mlp.shared_experts."), {}, projections_, &arena);
      VLLM_CHECK(L.shared_gate_up.out_features == 2 * int64_t(m.shared_intermediate_size),
                 "layer ", i, " shared experts' gate/up do not match n_shared_experts x "
                 "moe_intermediate_size");
      L.shared_down = Linear::fused({w.require(p + "mlp.shared_experts.down_proj.weight")}, {},
                                    projections_);
    }
    const auto down = [&](int e) {
      return w.require(p + "mlp.experts." + std::to_string(e) + ".down_proj.weight");
    };
    const auto check = [&](int e, int64_t gate_up_rows, int64_t down_inputs) {
      VLLM_CHECK(gate_up_rows == 2 * F && down_inputs == F, "layer ", i, " expert ", e,
                 " shapes do not match moe_intermediate_size ", F);
    };
    if (device_ == kCpu) {
      for (int e = 0; e < m.num_experts; ++e) {
        L.expert_gate_up.push_back(
            Linear::fused(expert_gate_up_weights(w, p, e), {}, projections_, &arena));
        L.expert_down.push_back(Linear::fused({down(e)}, {}, projections_));
        check(e, L.expert_gate_up[e].out_features, L.expert_down[e].parts[0].size(1));
      }
    } else {
      // FP8 experts (checkpoints with one scale a row, --quantization fp8) stay FP8 where the
      // GPU keeps FP8 weights (stacks_as_fp8): --quantization fp8 quantizes each routed
      // expert's tensors there, one scale a tensor; the shared experts are quantized on the
      // host before they are cut into slices (one scale for the whole tensor, as on the CPU).
      // Elsewhere (--dtype float16/float32) the grouped kernels read the compute type, and
      // --quantization fp8 gives the experts their FP8 values in it: where that is the stored
      // type the GPU rounds each routed expert's tensors once uploaded (below); else, and for
      // the shared experts, the host does.
      const DType stored = down(0).dtype();
      const bool fp8_stack = stacks_as_fp8(down(0), projections_) &&
                             stacks_as_fp8(expert_gate_up_weights(w, p, 0)[0], projections_);
      const bool round_on_device = !fp8_stack && c.quantize_fp8 &&
                                   placement_.compute_dtype(stored) == stored &&
                                   (stored == DType::F32 || stored == DType::F16 ||
                                    stored == DType::BF16);
      const auto on_host = [&](const Tensor& t) {
        if (!c.quantize_fp8) return t;
        return round_on_device ? fp8_values(t) : quantize_fp8_per_tensor(t);
      };
      const bool routed_as_stored = fp8_stack || round_on_device;
      std::vector<std::vector<Tensor>> gate_up, downs;
      for (int e = 0; e < m.num_experts; ++e) {
        std::vector<Tensor> gu = expert_gate_up_weights(w, p, e);
        if (!routed_as_stored)
          for (Tensor& t : gu) t = on_host(t);
        gate_up.push_back(std::move(gu));
        downs.push_back({routed_as_stored ? down(e) : on_host(down(e))});
      }
      // The shared experts as experts E .. E + S / F - 1, slices F wide of their projections,
      // which every token takes with weight 1 (moe_route): the grouped kernels run them with
      // the routed ones, and their outputs join the routed sum last.
      if (shared_stacked) {
        std::vector<Tensor> gu = gate_up_weights(w, p, "mlp.shared_experts.");
        for (Tensor& t : gu) t = on_host(t);
        const Tensor sd = on_host(w.require(p + "mlp.shared_experts.down_proj.weight"));
        const bool one = gu.size() == 1;  // gate_up_proj stored fused
        VLLM_CHECK(gu[0].size(0) == (one ? 2 * S : S) && (one || gu[1].size(0) == S) &&
                       sd.ndim() == 2 && sd.size(1) == S,
                   "layer ", i, " shared experts' shapes do not match n_shared_experts x "
                   "moe_intermediate_size");
        for (int64_t j = 0; j < S / F; ++j) {
          gate_up.push_back({gu[0].narrow(j * F, F), one ? gu[0].narrow(S + j * F, F)
                                                         : gu[1].narrow(j * F, F)});
          downs.push_back({copy_columns(sd, j * F, F)});
        }
        L.shared_in_stack = static_cast<int>(S / F);
      }
      // stack_experts checks that every expert has expert 0's shapes; the routed experts'
      // float tensors are quantized there only for an FP8 stack.
      const WeightPlacement& stacking = fp8_stack ? projections_ : placement_;
      L.stacked_gate_up = stack_experts(gate_up, stacking);
      L.stacked_down = stack_experts(downs, stacking);
      check(0, L.stacked_gate_up.size(1), L.stacked_down.size(2));
      for (int e = 0; round_on_device && e < m.num_experts; ++e) {
        Tensor gate = L.stacked_gate_up.narrow(e, 1).reshape({2 * F, c.hidden_size});
        Tensor up = gate.narrow(F, F), down_e = L.stacked_down.narrow(e, 1);
        gate = gate.narrow(0, F);
        round_fp8_per_tensor(gate);
        round_fp8_per_tensor(up);
        round_fp8_per_tensor(down_e);
      }
    }
  } else {
    L.gate_up = Linear::fused(gate_up_weights(w, p), {}, projections_, &arena);
    VLLM_CHECK(L.gate_up.out_features == 2 * int64_t(c.intermediate_size), "layer ", i,
               " gate/up shapes do not match intermediate_size ", c.intermediate_size);
    L.down = Linear::fused({w.require(p + "mlp.down_proj.weight")}, {}, projections_);
  }
  const bool whole = spec.qk_norm == QkNorm::kWhole;
  if (spec.qk_norm != QkNorm::kNone) {
    L.q_norm = norm_weight(w, p + "self_attn.q_norm.weight", whole ? c.q_size() : c.head_dim);
    L.k_norm = norm_weight(w, p + "self_attn.k_norm.weight", whole ? c.kv_size() : c.head_dim);
  }
  return L;
}

void DecoderModel::load_mla(Layer& L, const std::string& p, const WeightSource& w) const {
  const ModelConfig& c = config_;
  const MlaSpec& m = c.mla;
  const int64_t H = c.num_heads, nope = m.qk_nope_head_dim, v = m.v_head_dim,
                lat = m.kv_lora_rank;
  const int64_t q_width = m.q_lora_rank > 0 ? m.q_lora_rank : H * m.qk_head_dim();
  VLLM_CHECK(L.qkv.out_features == q_width + m.latent_width(), p,
             "q and kv_a projections do not match the config's MLA sizes");
  if (m.q_lora_rank > 0) {
    L.q_a_norm = norm_weight(w, p + "self_attn.q_a_layernorm.weight", m.q_lora_rank);
    L.q_b = Linear::fused({w.require(p + "self_attn.q_b_proj.weight")}, {}, projections_);
    VLLM_CHECK(L.q_b.out_features == H * m.qk_head_dim(), p, "self_attn.q_b_proj rows");
  }
  L.kv_a_norm = norm_weight(w, p + "self_attn.kv_a_layernorm.weight", lat);
  const auto kv_b_stored = w.get(p + "self_attn.kv_b_proj.weight");
  if (!kv_b_stored) {  // GGUF deepseek2: per head, k_b = W_UK[h]^T and v_b = W_UV[h] already
    const Tensor k_b = to_f32(w.require(p + "self_attn.k_b_proj.weight"));
    const Tensor v_b = to_f32(w.require(p + "self_attn.v_b_proj.weight"));
    VLLM_CHECK(k_b.ndim() == 3 && k_b.size(0) == H && k_b.size(1) == lat &&
                   k_b.size(2) == nope && v_b.ndim() == 3 && v_b.size(0) == H &&
                   v_b.size(1) == v && v_b.size(2) == lat,
               p, "attn_k_b ", k_b.shape_str(), " / attn_v_b ", v_b.shape_str(),
               " do not match the MLA sizes");
    const DType stored = w.require(p + "self_attn.k_b_proj.weight").dtype();
    L.uk_t = place_weight(k_b, placement_, stored);
    L.uv = place_weight(v_b, placement_, stored);
    return;
  }
  // Under --quantization fp8 the FP8 values of kv_b_proj, as vLLM dequantizes it for MLA.
  const Tensor kv_b =
      to_f32(c.quantize_fp8 ? quantize_fp8_per_tensor(*kv_b_stored) : *kv_b_stored);
  VLLM_CHECK(kv_b.ndim() == 2 && kv_b.size(0) == H * (nope + v) && kv_b.size(1) == lat, p,
             "self_attn.kv_b_proj is ", kv_b.shape_str(), ", the config needs [",
             H * (nope + v), ", ", lat, "]");
  Tensor uk_t = Tensor::empty({H, lat, nope}, DType::F32);
  Tensor uv = Tensor::empty({H, v, lat}, DType::F32);
  for (int64_t h = 0; h < H; ++h) {
    const float* rows = kv_b.data<float>() + h * (nope + v) * lat;  // W_UK[h] then W_UV[h]
    float* uk_h = uk_t.data<float>() + h * lat * nope;
    for (int64_t n = 0; n < nope; ++n)
      for (int64_t l = 0; l < lat; ++l) uk_h[l * nope + n] = rows[n * lat + l];
    std::copy(rows + nope * lat, rows + (nope + v) * lat, uv.data<float>() + h * v * lat);
  }
  // On a GPU in the checkpoint's type (exact: each value came from it).
  L.uk_t = place_weight(uk_t, placement_, kv_b_stored->dtype());
  L.uv = place_weight(uv, placement_, kv_b_stored->dtype());
}

Tensor DecoderModel::score(std::span<const int32_t> tokens) const {
  backend_for(device_).make_current();
  const int n = static_cast<int>(tokens.size());
  constexpr int kBlock = 16;
  const int blocks = (n + kBlock - 1) / kBlock, groups = static_cast<int>(groups_.size());
  KvCache cache = allocate_kv_cache(blocks * groups, kBlock);
  std::vector<int32_t> rows(n);
  std::iota(rows.begin(), rows.end(), 0);
  Tensor logits = forward(
      single_sequence_batch(tokens, 0, single_sequence_tables(groups, blocks), kBlock, rows),
      cache);
  return device_ == kCpu ? logits : logits.to(kCpu);
}

// vLLM's grouping: layers of equal cache spec (here: the window) share a group; with several
// specs, each group holds as many layers as the rarest spec has, so that every group's blocks
// cost the same bytes and one pool serves them all.
void DecoderModel::make_kv_cache_groups() {
  const ModelConfig& c = config_;
  std::map<int, std::vector<int>> by_window;
  for (int i = 0; i < c.num_layers; ++i) by_window[c.layers[i].sliding_window].push_back(i);
  size_t size = c.num_layers;
  for (const auto& [w, layers] : by_window) size = std::min(size, layers.size());
  layer_group_.assign(c.num_layers, 0);
  layer_slot_.assign(c.num_layers, 0);
  // Full attention first, so that a model's group 0 is its global layers when it has any.
  for (const auto& [w, layers] : by_window)
    for (size_t first = 0; first < layers.size(); first += size) {
      KvCacheGroup& g = groups_.emplace_back();
      g.sliding_window = w;
      for (size_t j = first; j < std::min(layers.size(), first + size); ++j) {
        layer_group_[layers[j]] = static_cast<int>(groups_.size()) - 1;
        layer_slot_[layers[j]] = static_cast<int>(j - first);
        g.layers.push_back(layers[j]);
      }
    }
  group_size_ = static_cast<int>(size);
}

void DecoderModel::set_kv_cache_dtype(const std::string& name) {
  if (name.empty() || name == "auto") return;
  if (name != "fp8" && name != "fp8_e4m3")
    throw Error("--kv-cache-dtype " + name + ": supported are auto, fp8 and fp8_e4m3");
  if (is_mla())
    throw Error("--kv-cache-dtype " + name + ": not with multi-head latent attention yet");
  kv_dtype_ = DType::F8_E4M3;
}

int64_t DecoderModel::kv_bytes_per_layer_token() const {
  const int64_t elems =
      is_mla() ? config_.mla.cache_row_width : int64_t(2) * config_.kv_size();
  return elems * dtype_info(kv_dtype()).block_bytes;
}

int64_t DecoderModel::kv_bytes_per_token() const {
  return group_size_ * kv_bytes_per_layer_token();
}

DecoderModel::StepMemory DecoderModel::profile_step_memory(int max_tokens, int max_logits_rows,
                                                          int max_model_len,
                                                          int block_size) const {
  VLLM_CHECK(max_tokens > 0 && max_logits_rows > 0 && block_size > 0, "profile sizes");
  if (device_.kind == DeviceKind::Cpu) return {};  // the CPU KV cache takes --kv-cache-memory
  Backend& be = backend_for(device_);
  be.make_current();
  StepMemory m;
  {
    const int blocks = (max_tokens + block_size - 1) / block_size;
    KvCache cache = allocate_kv_cache(blocks, block_size);
    // A prefill step at the token budget: one sequence of max_tokens tokens, the last rows
    // wanting logits.
    const std::vector<int32_t> tokens(static_cast<size_t>(max_tokens), 0);
    const int rows = std::min(max_tokens, max_logits_rows);
    std::vector<int32_t> logits_rows(static_cast<size_t>(rows));
    std::iota(logits_rows.begin(), logits_rows.end(), max_tokens - rows);
    std::vector<std::vector<int32_t>> tables(groups_.size(), std::vector<int32_t>(blocks));
    for (auto& t : tables) std::iota(t.begin(), t.end(), 0);
    const ForwardBatch batch =
        single_sequence_batch(tokens, 0, tables, block_size, std::move(logits_rows));
    std::vector<AttentionMeta> meta;
    const StepInputs in = upload_inputs(batch, meta, Tensor());
    be.begin_profile();
    compute(in, cache);
    m.activation_bytes = be.end_profile().peak_bytes;
    m.graph_arena_bytes = measure_graph_arena(max_model_len, block_size, cache);
  }
  be.release_cached_memory();  // the dummy cache and steps: not the weights' share
  return m;
}

KvCache DecoderModel::allocate_kv_cache(int num_blocks, int block_size) const {
  KvCache cache;
  cache.num_blocks = num_blocks;
  cache.block_size = block_size;
  // One K and one V buffer per place in a group, shared by the layers at that place; MLA
  // layers keep one latent row per token in k and no v. Uninitialised: attention only reads
  // slots written before, and untouched pages cost no RSS.
  std::vector<Tensor> k, v;
  for (int j = 0; j < group_size_; ++j) {
    if (is_mla()) {
      k.push_back(Tensor::empty({num_blocks, block_size, 1, config_.mla.cache_row_width},
                                kv_dtype(), device_));
      v.emplace_back();
      continue;
    }
    for (auto* side : {&k, &v})
      side->push_back(Tensor::empty(
          {num_blocks, block_size, config_.num_kv_heads, config_.head_dim}, kv_dtype(), device_));
  }
  for (int i = 0; i < config_.num_layers; ++i) {
    cache.k.push_back(k[layer_slot_[i]]);
    cache.v.push_back(v[layer_slot_[i]]);
  }
  return cache;
}

void DecoderModel::check_batch(const ForwardBatch& batch, const KvCache& cache) const {
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens();
  VLLM_CHECK(T > 0, "empty batch");
  VLLM_CHECK(batch.positions.size() == size_t(T), "batch arrays disagree in length");
  VLLM_CHECK(batch.num_groups() == static_cast<int>(groups_.size()) &&
                 batch.slot_mappings.size() == groups_.size(),
             "batch for ", batch.num_groups(), " KV cache groups, the model has ", groups_.size());
  for (int32_t id : batch.token_ids)
    VLLM_CHECK(id >= 0 && id < c.vocab_size, "token id ", id, " outside vocab of ", c.vocab_size);
  const int64_t num_slots = int64_t(cache.num_blocks) * cache.block_size;
  for (const auto& slots : batch.slot_mappings) {
    VLLM_CHECK(slots.size() == size_t(T), "batch arrays disagree in length");
    for (int32_t s : slots) VLLM_CHECK(s < num_slots, "slot ", s, " beyond cache of ", num_slots);
  }
}

DecoderModel::StepInputs DecoderModel::host_inputs(const ForwardBatch& batch) const {
  StepInputs in;
  in.ids = host_i32(batch.token_ids);
  in.positions = host_i32(batch.positions);
  in.rows_wanted = host_i32(batch.logits_indices);
  for (int g = 0; g < batch.num_groups(); ++g) {
    in.slots.push_back(host_i32(batch.slot_mappings[g]));
    in.meta.push_back(&batch.attn[g]);
  }
  return in;
}

Tensor DecoderModel::forward(const ForwardBatch& batch, KvCache& cache,
                             const std::function<bool()>& cancelled) const {
  check_batch(batch, cache);
  if (device_.kind == DeviceKind::Cpu) return compute(host_inputs(batch), cache, cancelled);
  backend_for(device_).make_current();  // a tensor-parallel rank's thread, or a new thread
  if (auto logits = forward_graph(batch, cache)) return *logits;
  std::vector<AttentionMeta> meta;
  const StepInputs in = upload_inputs(batch, meta, Tensor());
  return compute(in, cache, cancelled);
}

DecoderModel::StepInputs DecoderModel::upload_inputs(const ForwardBatch& batch,
                                                     std::vector<AttentionMeta>& meta,
                                                     Tensor buffer) const {
  // Token arrays, then per group: slots, query_start_loc, seq_lens, block tables.
  std::vector<const std::vector<int32_t>*> parts = {&batch.token_ids, &batch.positions,
                                                    &batch.logits_indices};
  for (int g = 0; g < batch.num_groups(); ++g) {
    const AttentionMeta& a = batch.attn[g];
    for (const auto* p : {&batch.slot_mappings[g], &a.query_start_loc, &a.seq_lens,
                          &a.block_tables})
      parts.push_back(p);
  }
  std::vector<int32_t> packed;
  for (const auto* p : parts) packed.insert(packed.end(), p->begin(), p->end());
  if (!buffer.defined()) buffer = Tensor::empty({int64_t(packed.size())}, DType::I32, device_);
  VLLM_CHECK(buffer.numel() == int64_t(packed.size()), "step input buffer size");
  backend_for(device_).copy(buffer.raw(), device_, packed.data(), kCpu, packed.size() * 4);
  std::vector<Tensor> views;
  int64_t off = 0;
  for (const auto* p : parts) {
    views.push_back(buffer.narrow(off, static_cast<int64_t>(p->size())));
    off += static_cast<int64_t>(p->size());
  }
  StepInputs in{views[0], views[1], views[2], {}, {}};
  meta.assign(batch.attn.begin(), batch.attn.end());
  for (int g = 0; g < batch.num_groups(); ++g) {
    const Tensor* v = &views[3 + 4 * g];
    in.slots.push_back(v[0]);
    meta[g].device_query_start_loc = v[1];
    meta[g].device_seq_lens = v[2];
    meta[g].device_block_tables = v[3];
  }
  for (const AttentionMeta& m : meta) in.meta.push_back(&m);
  return in;
}

// The activations of one step, [T, ...]: `residual` is the running stream, `h` the normed
// input of a block where the backend does not norm inside the matmul.
struct DecoderModel::Scratch {
  Tensor residual, h, qkv, attn, block_out, gate_up, act;
  Tensor q, q_latent, out_latent;  // MLA: q after q_b_proj, the query and output in latent space
  // MLA on a GPU, steps mixing short and long sequences: each group's metadata with the long
  // ones skipped (mla_attend), made once per step rather than once per layer.
  std::map<const AttentionMeta*, AttentionMeta> mla_short_only;
};

Tensor DecoderModel::hidden_states(const ForwardBatch& batch, KvCache& cache) const {
  VLLM_CHECK(device_.kind == DeviceKind::Cpu && !comm_,
             "hidden_states runs on the CPU with one rank");
  check_batch(batch, cache);
  Scratch s;
  const Scratch kept = run_layers(host_inputs(batch), cache, s);
  Tensor out = Tensor::empty(kept.residual.shape(), DType::F32, device_);
  rms_norm(kept.residual, final_norm, static_cast<float>(config_.rms_norm_eps), out);
  return out;
}

Tensor DecoderModel::compute(const StepInputs& in, KvCache& cache,
                             const std::function<bool()>& cancelled) const {
  const ModelConfig& c = config_;
  const int64_t num_logits = in.rows_wanted.size(0);
  const Device d = device_;
  Scratch s;
  Scratch kept = run_layers(in, cache, s, cancelled);
  const float eps = static_cast<float>(c.rms_norm_eps);
  Tensor logits = Tensor::empty({num_logits, c.vocab_size}, DType::F32, d);
  if (comm_) {
    Tensor part = Tensor::empty({num_logits, lm_head.size(0)}, DType::F32, d);
    rms_norm_matmul(kept.residual, final_norm, eps, lm_head, kept.h, part);
    comm_->all_gather_columns(part, logits);
  } else {
    rms_norm_matmul(kept.residual, final_norm, eps, lm_head, kept.h, logits);
  }
  if (c.logits_multiplier != 1.0) scale(logits, static_cast<float>(c.logits_multiplier));
  return logits;
}

DecoderModel::Scratch DecoderModel::run_layers(const StepInputs& in, KvCache& cache, Scratch& s,
                                               const std::function<bool()>& cancelled) const {
  const ModelConfig& c = config_;
  const int64_t T = in.ids.size(0);
  const int64_t num_logits = in.rows_wanted.size(0);
  const Device d = device_;
  s.residual = Tensor::empty({T, c.hidden_size}, DType::F32, d);
  s.h = Tensor::empty({T, c.hidden_size}, DType::F32, d);
  s.qkv = Tensor::empty({T, layers_[0].qkv.out_features}, DType::F32, d);
  if (is_mla()) {
    const MlaSpec& m = c.mla;
    if (m.q_lora_rank > 0) s.q = Tensor::empty({T, c.num_heads * m.qk_head_dim()}, DType::F32, d);
    s.q_latent = Tensor::empty({T, c.num_heads, m.latent_width()}, DType::F32, d);
    s.out_latent = Tensor::empty({T, c.num_heads, m.kv_lora_rank}, DType::F32, d);
    s.attn = Tensor::empty({T, c.num_heads, m.v_head_dim}, DType::F32, d);
  } else {
    s.attn = Tensor::empty({T, c.num_heads, c.head_dim}, DType::F32, d);
  }
  s.block_out = Tensor::empty({T, c.hidden_size}, DType::F32, d);
  s.gate_up = Tensor::empty({T, 2 * int64_t(c.intermediate_size)}, DType::F32, d);
  s.act = Tensor::empty({T, c.intermediate_size}, DType::F32, d);

  embed(in.ids, s.residual);
  if (c.embedding_multiplier != 1.0) scale(s.residual, static_cast<float>(c.embedding_multiplier));
  const int last = c.num_layers - 1;
  for (int i = 0; i < last; ++i) {
    if (cancelled && cancelled()) throw StepCancelled{};
    attention_block(layers_[i], i, in, cache, s);
    mlp_block(i, layers_[i], s);
  }
  // The last layer's attention writes every row's K/V; after it only the rows that give logits
  // matter, so its MLP, the final norm and the LM head see just those (as llama.cpp does).
  attention_block(layers_[last], last, in, cache, s);
  Scratch kept;
  kept.residual = s.block_out.narrow(0, num_logits);
  embedding(in.rows_wanted, s.residual, kept.residual);
  kept.h = s.h.narrow(0, num_logits);
  kept.block_out = s.residual.narrow(0, num_logits);
  kept.gate_up = s.gate_up.narrow(0, num_logits);
  kept.act = s.act.narrow(0, num_logits);
  if (num_logits > 0) mlp_block(last, layers_[last], kept);
  return kept;
}

void DecoderModel::attention_block(const Layer& L, int i, const StepInputs& in, KvCache& cache,
                                   Scratch& s) const {
  if (L.spec.attention == AttentionType::kMla) return mla_attention_block(L, i, in, cache, s);
  const ModelConfig& c = config_;
  const LayerSpec& spec = L.spec;
  const float eps = static_cast<float>(c.rms_norm_eps);
  Tensor& k_cache = cache.k[i];
  Tensor& v_cache = cache.v[i];
  const Tensor& slots = in.slots[layer_group_[i]];
  const AttentionMeta& meta = *in.meta[layer_group_[i]];
  Tensor q = s.qkv.slice(1, 0, c.q_size()).split_last(c.num_heads);
  const bool pre_norm = L.attn_norm.defined();
  if (pre_norm && spec.qk_norm == QkNorm::kNone) {  // one fused front-end where there is one
    L.qkv.normed_rope_cache(s.residual, L.attn_norm, eps, s.h, s.qkv, c.num_heads, in.positions,
                            L.rope, k_cache, v_cache, slots);
  } else {
    if (pre_norm) L.qkv.normed(s.residual, L.attn_norm, eps, s.h, s.qkv);
    else L.qkv(s.residual, s.qkv);
    QkvHeads heads = split_qkv(s.qkv, c.num_heads, c.num_kv_heads, c.head_dim);
    if (spec.qk_norm == QkNorm::kPerHead) {  // between the projection and the rotation
      const HeadNorms norms{&L.q_norm, &L.k_norm, eps, c.num_heads};
      qk_norm_rope_and_cache(heads.qk, norms, in.positions, L.rope, heads.k, heads.v, k_cache,
                             v_cache, slots);
    } else {
      if (spec.qk_norm == QkNorm::kWhole) {
        Tensor qw = s.qkv.slice(1, 0, c.q_size());
        Tensor kw = s.qkv.slice(1, c.q_size(), c.kv_size());
        rms_norm(qw, L.q_norm, eps, qw);
        rms_norm(kw, L.k_norm, eps, kw);
      }
      rope_and_cache(heads.qk, in.positions, L.rope, heads.k, heads.v, k_cache, v_cache,
                     slots);
    }
  }
  float softmax_scale = c.softmax_scale();
  if (c.scale_q_before_attention) {
    Tensor qw = s.qkv.slice(1, 0, c.q_size());
    scale(qw, softmax_scale);
    softmax_scale = 1.0f;
  }
  paged_attention(q, k_cache, v_cache, meta, softmax_scale, spec.sliding_window, s.attn);
  add_block_output(L.o, s.attn.merge_last(), L.attn_post_norm, s.block_out, s.residual);
}

// Multi-head latent attention in latent space, for prefill and decode steps alike (one
// arithmetic order per token, so its logits do not depend on the step it is computed in):
// each head's query becomes [W_UK[h]^T q_nope, rope(q_pe)] and attends over the cached rows
// [c, rope(k_pe)] with the latent c as value; W_UV[h] then maps the output to the head's values.
void DecoderModel::mla_attention_block(const Layer& L, int i, const StepInputs& in,
                                       KvCache& cache, Scratch& s) const {
  const ModelConfig& c = config_;
  const MlaSpec& m = c.mla;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t H = c.num_heads, nope = m.qk_nope_head_dim, rot = m.qk_rope_head_dim,
                lat = m.kv_lora_rank;
  // [q or q_a | c | k_pe] = norm(x) @ [W_q or W_qa; W_kva]^T
  L.qkv.normed(s.residual, L.attn_norm, eps, s.h, s.qkv);
  const int64_t q_width = L.qkv.out_features - m.latent_width();
  Tensor q = s.qkv.slice(1, 0, q_width);
  if (m.q_lora_rank > 0) {
    rms_norm(q, L.q_a_norm, eps, q);
    L.q_b(q, s.q);
    q = s.q;
  }
  Tensor latent = s.qkv.slice(1, q_width, lat);
  Tensor k_pe = s.qkv.slice(1, q_width + lat, rot).split_last(1);  // [T, 1, rot]
  const Tensor heads = q.split_last(H);                              // [T, H, nope + rot]
  Tensor q_lat_nope = s.q_latent.slice(2, 0, lat);
  matmul_heads(heads.slice(2, 0, nope), L.uk_t, q_lat_nope);
  Tensor q_pe = s.q_latent.slice(2, lat, rot);
  // The cache row [norm(c), rope(k_pe)] lives in the first latent_width lanes; padding is never
  // touched.
  Tensor& row = cache.k[i];
  Tensor c_lanes = row.slice(3, 0, lat), pe_lanes = row.slice(3, lat, rot);
  mla_rope_and_cache(latent, L.kv_a_norm, eps, heads.slice(2, nope, rot), q_pe, k_pe,
                     in.positions, L.rope, c_lanes, pe_lanes, in.slots[layer_group_[i]]);
  mla_attend(row.slice(3, 0, m.latent_width()), lat, *in.meta[layer_group_[i]],
             L.spec.sliding_window, s);
  matmul_heads(s.out_latent, L.uv, s.attn);
  add_block_output(L.o, s.attn.merge_last(), L.attn_post_norm, s.block_out, s.residual);
}

// s.out_latent = attention of s.q_latent over the latent rows. On a GPU, sequences with
// kMlaPrefillRows query rows or more take mla_prefill_attention, whose GEMMs run on tensor
// cores; the paged kernel serves the others (and leaves those rows alone). So on a GPU a
// token's arithmetic depends on the query length of its sequence in the step.
void DecoderModel::mla_attend(const Tensor& rows, int64_t v_dim, const AttentionMeta& a,
                              int window, Scratch& s) const {
  const float scale = static_cast<float>(config_.softmax_scale());
  const Tensor values = rows.slice(3, 0, v_dim);
  const int n = a.num_seqs();
  const auto q_len = [&](int b) { return a.query_start_loc[b + 1] - a.query_start_loc[b]; };
  int long_seqs = 0;
  if (device_.kind != DeviceKind::Cpu)
    for (int b = 0; b < n; ++b) long_seqs += q_len(b) >= kMlaPrefillRows;
  if (long_seqs == 0) {
    paged_attention(s.q_latent, rows, values, a, scale, window, s.out_latent);
    return;
  }
  if (long_seqs < n) {
    auto it = s.mla_short_only.find(&a);
    if (it == s.mla_short_only.end()) {
      it = s.mla_short_only.emplace(&a, a).first;
      it->second.skip_queries_from = kMlaPrefillRows;
    }
    paged_attention(s.q_latent, rows, values, it->second, scale, window, s.out_latent);
  }
  for (int b = 0; b < n; ++b) {
    if (q_len(b) < kMlaPrefillRows) continue;
    const int64_t t0 = a.query_start_loc[b];
    Tensor out = s.out_latent.narrow(t0, q_len(b));
    mla_prefill_attention(s.q_latent.narrow(t0, q_len(b)), rows, a, b, int(v_dim), scale,
                          window, out);
  }
}

void DecoderModel::mlp_block(int layer, const Layer& L, Scratch& s) const {
  if (L.spec.mlp == MlpType::kMoe) return moe_block(layer, L, s);
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const bool silu = L.spec.activation == Activation::kSilu;
  if (L.ffn_norm.defined() && silu) {
    L.gate_up.normed_silu(s.residual, L.ffn_norm, eps, s.h, s.gate_up, s.act);
  } else {
    if (L.ffn_norm.defined()) L.gate_up.normed(s.residual, L.ffn_norm, eps, s.h, s.gate_up);
    else L.gate_up(s.residual, s.gate_up);
    if (silu) silu_and_mul(s.gate_up, s.act);
    else if (config_.gelu_f16) gelu_tanh_f16_and_mul(s.gate_up, s.act);
    else gelu_tanh_and_mul(s.gate_up, s.act);
  }
  add_block_output(L.down, s.act, L.ffn_post_norm, s.block_out, s.residual);
}

// Routing on the host (CPU models): for each token, the MoeSpec's scores, the group limit, the
// top_k (ties to the lower index), their weights. runtime/cuda/moe.cu does the same on a GPU.
void DecoderModel::route(int layer, const Layer& L, const Tensor& scores,
                         std::vector<std::vector<int32_t>>& rows,
                         std::vector<std::vector<float>>& weights) const {
  const MoeSpec& m = config_.moe;
  const int E = m.num_experts, per_group = E / m.num_groups;
  const int64_t T = scores.size(0);
  rows.assign(E, {});
  weights.assign(E, {});
  std::vector<float> p(E), choice(E), group(m.num_groups);
  std::vector<int> order(E), groups(m.num_groups);
  const float* bias = L.router_bias.defined() ? L.router_bias.data<float>() : nullptr;
  // The k best indices first (ties to the lower index); with an observer, k + 1 of them, and
  // the relative margin between the k-th and the next is folded into `margin`.
  auto top = [&](std::vector<int>& idx, int k, const std::vector<float>& key, float& margin) {
    std::iota(idx.begin(), idx.end(), 0);
    const int sorted = routing_observer_ && k < int(idx.size()) ? k + 1 : k;
    std::partial_sort(idx.begin(), idx.begin() + sorted, idx.end(), [&](int a, int b) {
      return key[a] > key[b] || (key[a] == key[b] && a < b);
    });
    if (sorted > k) {
      const float kept = key[idx[k - 1]], left = key[idx[k]];
      margin = std::min(margin, (kept - left) / std::fabs(kept));
    }
  };
  for (int64_t t = 0; t < T; ++t) {
    const float* z = scores.data<float>() + t * E;
    float margin = INFINITY;
    if (m.scoring == MoeScoring::kSigmoid) {
      for (int e = 0; e < E; ++e) p[e] = 1.0f / (1.0f + std::exp(-z[e]));
    } else {
      const float mx = *std::max_element(z, z + E);
      float sum = 0;
      for (int e = 0; e < E; ++e) sum += (p[e] = std::exp(z[e] - mx));
      for (int e = 0; e < E; ++e) p[e] /= sum;
    }
    for (int e = 0; e < E; ++e) choice[e] = bias ? p[e] + bias[e] : p[e];
    if (m.num_groups > 1) {
      for (int g = 0; g < m.num_groups; ++g) {
        const float* v = choice.data() + g * per_group;
        if (m.group_score == GroupScore::kMax) {
          group[g] = *std::max_element(v, v + per_group);
        } else {  // the two best
          float a = -INFINITY, b = -INFINITY;
          for (int j = 0; j < per_group; ++j) {
            if (v[j] > a) b = a, a = v[j];
            else if (v[j] > b) b = v[j];
          }
          group[g] = a + b;
        }
      }
      top(groups, m.topk_groups, group, margin);
      std::vector<bool> kept(m.num_groups, false);
      for (int k = 0; k < m.topk_groups; ++k) kept[groups[k]] = true;
      for (int e = 0; e < E; ++e)
        if (!kept[e / per_group]) choice[e] = -INFINITY;
    }
    top(order, m.top_k, choice, margin);
    if (routing_observer_) routing_observer_(layer, t, margin);
    float sum = 0;
    for (int k = 0; k < m.top_k; ++k) sum += p[order[k]];
    const float norm = m.norm_topk_prob ? 1.0f / sum : 1.0f;
    for (int k = 0; k < m.top_k; ++k) {
      const int e = order[k];
      rows[e].push_back(static_cast<int32_t>(t));
      weights[e].push_back(p[e] * norm * static_cast<float>(m.routed_scaling_factor));
    }
  }
}

// The experts run grouped: the tokens routed to an expert go through its gate/up, activation
// and down as one matmul each, and are added back into their rows with their router weights,
// experts in ascending order (transformers' order); the shared experts' output is added last.
// On a GPU, that sum goes straight into the residual stream where nothing comes between.
void DecoderModel::moe_block(int layer, const Layer& L, Scratch& s) const {
  const ModelConfig& c = config_;
  const MoeSpec& m = c.moe;
  const int64_t T = s.residual.size(0), H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const Tensor& h = L.ffn_norm.defined() ? s.h : s.residual;
  // On a device the router normalises its input itself and leaves the normed rows in s.h for
  // the experts (one launch fewer a layer in decode).
  Tensor scores;
  if (device_ != kCpu) {
    scores = Tensor::empty({T, m.num_experts}, DType::F32, device_);
    if (L.ffn_norm.defined()) L.router.normed_keep(s.residual, L.ffn_norm, eps, s.h, scores);
    else L.router(h, scores);
  } else if (L.ffn_norm.defined()) {
    rms_norm(s.residual, L.ffn_norm, eps, s.h);
  }
  Tensor shared;  // the shared experts' output, where they are not stacked with the routed ones
  if (m.shared_intermediate_size > 0 && L.shared_in_stack == 0) {
    const int64_t S = m.shared_intermediate_size;
    Tensor gate_up = Tensor::empty({T, 2 * S}, DType::F32, device_);
    Tensor act = Tensor::empty({T, S}, DType::F32, device_);
    shared = Tensor::empty({T, H}, DType::F32, device_);
    if (device_ != kCpu && L.ffn_norm.defined()) {  // the norm again, inside the fused GEMV
      L.shared_gate_up.normed_silu(s.residual, L.ffn_norm, eps, s.h, gate_up, act);
    } else {
      L.shared_gate_up(h, gate_up);
      silu_and_mul(gate_up, act);
    }
    L.shared_down(act, shared);
  }
  Tensor& out = s.block_out;
  if (device_ == kCpu) {
    moe_experts_host(layer, L, h, out);
    if (shared.defined()) add(out, shared, out);
  } else if (!L.ffn_post_norm.defined() && c.residual_multiplier == 1.0 && !comm_) {
    moe_experts_device(layer, L, h, scores, shared, true, s.residual);
    return;
  } else {
    moe_experts_device(layer, L, h, scores, shared, false, out);
  }
  if (comm_) comm_->all_reduce_sum(out);  // each rank ran its columns of every expert
  if (L.ffn_post_norm.defined()) rms_norm(out, L.ffn_post_norm, eps, out);
  if (c.residual_multiplier != 1.0) scale(out, static_cast<float>(c.residual_multiplier));
  add(s.residual, out, s.residual);
}

// The embedding rows of `ids`. Vocab-parallel (tensor parallelism): each rank holds a slice of
// the table, writes the rows it has into zeros and the sum over ranks gives every row exactly.
void DecoderModel::embed(const Tensor& ids, Tensor& out) const {
  if (!comm_) {
    embedding(ids, embed_tokens, out);
    return;
  }
  const Share rows = share_of(config_.vocab_size, {comm_->rank(), comm_->size()});
  embedding_rows(ids, embed_tokens, rows.begin, out);
  comm_->all_reduce_sum(out);
}

// On the CPU: routing on the host, then each expert's rows gathered and run through its
// Linear (quantized experts stay quantized).
void DecoderModel::moe_experts_host(int layer, const Layer& L, const Tensor& h,
                                    Tensor& out) const {
  const MoeSpec& m = config_.moe;
  const int64_t H = config_.hidden_size, F = m.intermediate_size;
  Tensor scores = Tensor::empty({h.size(0), m.num_experts}, DType::F32, device_);
  L.router(h, scores);
  std::vector<std::vector<int32_t>> rows;
  std::vector<std::vector<float>> weights;
  route(layer, L, scores, rows, weights);
  fill(out, 0.0f);
  for (int e = 0; e < m.num_experts; ++e) {
    const int64_t n = static_cast<int64_t>(rows[e].size());
    if (n == 0) continue;
    Tensor ids = host_i32(rows[e]), w = Tensor::empty({n}, DType::F32);
    std::copy(weights[e].begin(), weights[e].end(), w.data<float>());
    Tensor x = Tensor::empty({n, H}, DType::F32);
    embedding(ids, h, x);
    Tensor gate_up = Tensor::empty({n, 2 * F}, DType::F32);
    Tensor act = Tensor::empty({n, F}, DType::F32);
    Tensor y = Tensor::empty({n, H}, DType::F32);
    L.expert_gate_up[e](x, gate_up);
    silu_and_mul(gate_up, act);
    L.expert_down[e](act, y);
    index_add_scaled(y, ids, w, out);
  }
}

// On a GPU nothing comes to the host: the router's scores are turned into each token's experts
// there, the routed rows grouped by expert, and each projection is one grouped kernel over the
// experts that have rows (runtime/cuda/moe.cu picks a GEMV or a tensor-core GEMM by the rows
// per expert; the GEMV applies the activation as it writes). Stacked shared experts are taken
// by every token after its routed ones. out = the sum + extra (when defined), or out += that
// with accumulate.
void DecoderModel::moe_experts_device(int layer, const Layer& L, const Tensor& h,
                                      const Tensor& scores, const Tensor& extra,
                                      bool accumulate, Tensor& out) const {
  const MoeSpec& m = config_.moe;
  const int64_t T = h.size(0), H = config_.hidden_size, F = m.intermediate_size;
  const int k = m.top_k + L.shared_in_stack;  // experts a token takes
  const int64_t S = T * k;
  const int E = m.num_experts;
  MoeRouting r;
  r.top_k = m.top_k;
  r.sigmoid = m.scoring == MoeScoring::kSigmoid;
  r.num_groups = m.num_groups;
  r.topk_groups = m.topk_groups;
  r.group_top2 = m.group_score != GroupScore::kMax;
  r.normalize = m.norm_topk_prob;
  r.scaling = static_cast<float>(m.routed_scaling_factor);
  r.shared = L.shared_in_stack;
  Tensor ids = Tensor::empty({T, k}, DType::I32, device_);
  Tensor weights = Tensor::empty({T, k}, DType::F32, device_);
  Tensor margins = routing_observer_ ? Tensor::empty({T}, DType::F32, device_) : Tensor();
  MoePlan plan;
  moe_route_align(scores, L.router_bias, r, ids, weights, margins, E + L.shared_in_stack, plan);
  if (routing_observer_) {  // tests only: a copy to the host (graphs are off meanwhile)
    const Tensor mg = margins.to(kCpu);
    for (int64_t t = 0; t < T; ++t) routing_observer_(layer, t, mg.data<float>()[t]);
  }
  Tensor act = Tensor::empty({S, F}, DType::F32, device_);
  Tensor y = Tensor::empty({S, H}, DType::F32, device_);
  moe_matmul_silu(h, plan.token, L.stacked_gate_up, plan, act);
  moe_matmul(act, Tensor(), L.stacked_down, plan, y);
  moe_combine(y, ids, weights, plan, out, extra, accumulate);
}

void DecoderModel::add_block_output(const Linear& lin, const Tensor& x, const Tensor& post_norm,
                                    Tensor& product, Tensor& residual) const {
  const float m = static_cast<float>(config_.residual_multiplier);
  if (!post_norm.defined() && m == 1.0f && !comm_) {
    lin.accumulate(x, product, residual);
    return;
  }
  lin(x, product);
  if (comm_) comm_->all_reduce_sum(product);  // a row-parallel projection: partial sums
  if (post_norm.defined()) rms_norm(product, post_norm, static_cast<float>(config_.rms_norm_eps), product);
  if (m != 1.0f) scale(product, m);
  add(residual, product, residual);
}

}  // namespace vllm
