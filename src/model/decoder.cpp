#include "model/decoder.h"

#include <algorithm>
#include <cmath>
#include <numeric>

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

}  // namespace

DecoderModel::DecoderModel(ModelConfig config, const WeightSource& w, const Progress& on_layer,
                           Device device)
    : config_(std::move(config)), device_(device) {
  const ModelConfig& c = config_;
  RopeTables tables = compute_rope_tables(c);
  rope_.inv_freq = std::move(tables.inv_freq);
  rope_.mscale = tables.mscale;
  rope_.head_dim = c.head_dim;
  rope_.rotary_dim = c.rotary_dim();
  rope_.neox = c.rope_neox;
  if (c.rope_ggml_theta) {
    rope_.ggml_theta = true;
    rope_.theta_scale = std::pow(static_cast<float>(c.rope_theta), -2.0f / c.rotary_dim());
    if (c.rope_scaling.type == "linear") rope_.freq_scale = 1.0f / static_cast<float>(c.rope_scaling.factor);
    // GGUF llama-3 files carry the llama3 scaling as per-frequency divisors.
    if (auto freqs = w.get("rope_freqs.weight")) {
      Tensor f = to_f32(*freqs);
      VLLM_CHECK(f.numel() == static_cast<int64_t>(rope_.inv_freq.size()), "rope_freqs size");
      rope_.freq_factors.assign(f.data<float>(), f.data<float>() + f.numel());
    }
  }

  const Tensor embed = w.require("model.embed_tokens.weight");
  VLLM_CHECK(embed.size(0) == c.vocab_size && embed.size(1) == c.hidden_size,
             "embed_tokens shape ", embed.shape_str());
  embed_tokens = place_weight(embed, device);
  final_norm = to_f32(w.require("model.norm.weight"), device);
  auto head = w.get("lm_head.weight");
  lm_head = head && !c.tie_word_embeddings ? place_weight(*head, device) : embed_tokens;
  if (c.kv_cache_f16)
    kv_dtype_ = DType::F16;
  else if (device.kind != DeviceKind::Cpu && embed_tokens.dtype() != DType::F32)
    kv_dtype_ = embed_tokens.dtype();

  // The fused q/k/v and gate/up copies of CPU weights share one huge-page buffer.
  size_t fused_bytes = 0;
  if (device.kind == DeviceKind::Cpu)
    for (int i = 0; i < c.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      for (auto names : {std::vector<std::string>{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
                         std::vector<std::string>{"mlp.gate_proj", "mlp.up_proj"}}) {
        std::vector<Tensor> parts;
        for (const auto& n : names) parts.push_back(w.require(p + n + ".weight"));
        if (std::all_of(parts.begin(), parts.end(), [&](const Tensor& t) { return t.dtype() == parts[0].dtype(); }))
          for (const Tensor& t : parts) fused_bytes += size_t(t.nbytes());
        fused_bytes += 64;  // alignment of each fused tensor
      }
    }
  HostWeightArena arena(fused_bytes);

  layers_.resize(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer& L = layers_[i];
    L.attn_norm = to_f32(w.require(p + "input_layernorm.weight"), device);
    L.ffn_norm = to_f32(w.require(p + "post_attention_layernorm.weight"), device);
    std::vector<Tensor> qkv_bias;
    if (c.attention_bias)
      for (const char* n : {"q_proj", "k_proj", "v_proj"})
        qkv_bias.push_back(w.require(p + "self_attn." + n + ".bias"));
    L.qkv = Linear::fused({w.require(p + "self_attn.q_proj.weight"),
                           w.require(p + "self_attn.k_proj.weight"),
                           w.require(p + "self_attn.v_proj.weight")},
                          qkv_bias, device, &arena);
    VLLM_CHECK(L.qkv.out_features == c.q_size() + 2 * c.kv_size(), "layer ", i,
               " q/k/v shapes do not match the config");
    L.o = Linear::fused({w.require(p + "self_attn.o_proj.weight")}, {}, device);
    L.gate_up = Linear::fused(
        {w.require(p + "mlp.gate_proj.weight"), w.require(p + "mlp.up_proj.weight")}, {}, device,
        &arena);
    L.down = Linear::fused({w.require(p + "mlp.down_proj.weight")}, {}, device);
    if (c.qk_norm) {
      L.q_norm = to_f32(w.require(p + "self_attn.q_norm.weight"), device);
      L.k_norm = to_f32(w.require(p + "self_attn.k_norm.weight"), device);
    }
    L.sliding_window = c.sliding_window.empty() ? 0 : c.sliding_window[i];
    if (on_layer) on_layer(i + 1, c.num_layers);
  }
}

Tensor DecoderModel::score(std::span<const int32_t> tokens) const {
  const int n = static_cast<int>(tokens.size());
  constexpr int kBlock = 16;
  KvCache cache = allocate_kv_cache((n + kBlock - 1) / kBlock, kBlock);
  std::vector<int32_t> table(cache.num_blocks), rows(n);
  std::iota(table.begin(), table.end(), 0);
  std::iota(rows.begin(), rows.end(), 0);
  Tensor logits = forward(single_sequence_batch(tokens, 0, table, kBlock, rows), cache);
  return device_ == kCpu ? logits : logits.to(kCpu);
}

int64_t DecoderModel::kv_bytes_per_token() const {
  return int64_t(2) * config_.num_layers * config_.kv_size() * dtype_info(kv_dtype()).block_bytes;
}

int64_t DecoderModel::activation_bytes(int64_t tokens, int64_t logits_rows,
                                       bool pieces_reused) const {
  const ModelConfig& c = config_;
  // compute(): residual, h, block_out; qkv; attn; gate_up; act; then rows and logits.
  const int64_t per_token = 3 * int64_t(c.hidden_size) + c.q_size() + 2 * c.kv_size() +
                            int64_t(c.num_heads) * c.head_dim + 3 * int64_t(c.intermediate_size);
  // 16-bit pieces: the matmul inputs (per layer qkv and gate_up take hidden, o takes q_size,
  // down intermediate; the LM head hidden again) and gate_up's product, which a backend may keep
  // in the weights' type for the silu (2 x intermediate per layer).
  const int64_t h = c.hidden_size, gate_up = 2 * int64_t(c.intermediate_size);
  const int64_t inputs =
      pieces_reused
          ? std::max<int64_t>({h, c.q_size(), c.intermediate_size, gate_up})
          : int64_t(c.num_layers) * (2 * h + c.q_size() + c.intermediate_size + gate_up) + h;
  return 4 * (tokens * per_token + logits_rows * (h + c.vocab_size)) + 2 * tokens * inputs;
}

KvCache DecoderModel::allocate_kv_cache(int num_blocks, int block_size) const {
  KvCache cache;
  cache.num_blocks = num_blocks;
  cache.block_size = block_size;
  // Uninitialised: attention only reads slots written before, and untouched pages cost no RSS.
  for (int i = 0; i < config_.num_layers; ++i) {
    for (auto* side : {&cache.k, &cache.v})
      side->push_back(Tensor::empty(
          {num_blocks, block_size, config_.num_kv_heads, config_.head_dim}, kv_dtype(), device_));
  }
  return cache;
}

Tensor DecoderModel::forward(const ForwardBatch& batch, KvCache& cache) const {
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens();
  VLLM_CHECK(T > 0, "empty batch");
  VLLM_CHECK(batch.positions.size() == size_t(T) && batch.slot_mapping.size() == size_t(T),
             "batch arrays disagree in length");
  for (int32_t id : batch.token_ids)
    VLLM_CHECK(id >= 0 && id < c.vocab_size, "token id ", id, " outside vocab of ", c.vocab_size);
  const int64_t num_slots = int64_t(cache.num_blocks) * cache.block_size;
  for (int32_t s : batch.slot_mapping)
    VLLM_CHECK(s < num_slots, "slot ", s, " beyond cache of ", num_slots);
  if (device_.kind == DeviceKind::Cpu) {
    StepInputs in;
    in.ids = host_i32(batch.token_ids);
    in.positions = host_i32(batch.positions);
    in.slots = host_i32(batch.slot_mapping);
    in.rows_wanted = host_i32(batch.logits_indices);
    in.meta = &batch.attn;
    return compute(in, cache);
  }
  if (auto logits = forward_graph(batch, cache)) return *logits;
  AttentionMeta meta;
  const StepInputs in = upload_inputs(batch, meta, Tensor());
  return compute(in, cache);
}

DecoderModel::StepInputs DecoderModel::upload_inputs(const ForwardBatch& batch,
                                                     AttentionMeta& meta, Tensor buffer) const {
  const AttentionMeta& a = batch.attn;
  const std::vector<const std::vector<int32_t>*> parts = {
      &batch.token_ids,   &batch.positions, &batch.slot_mapping, &batch.logits_indices,
      &a.query_start_loc, &a.seq_lens,      &a.block_tables};
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
  meta = a;
  meta.device_query_start_loc = views[4];
  meta.device_seq_lens = views[5];
  meta.device_block_tables = views[6];
  return StepInputs{views[0], views[1], views[2], views[3], &meta};
}

Tensor DecoderModel::compute(const StepInputs& in, KvCache& cache) const {
  const ModelConfig& c = config_;
  const int64_t T = in.ids.size(0);
  const int64_t num_logits = in.rows_wanted.size(0);
  const Tensor& positions = in.positions;
  const Tensor& slots = in.slots;
  const AttentionMeta* meta = in.meta;

  // Activations [T, ...]; `residual` is the running stream, `h` the normed input of a block
  // where the backend does not norm inside the matmul.
  const Device d = device_;
  Tensor residual = Tensor::empty({T, c.hidden_size}, DType::F32, d);
  Tensor h = Tensor::empty({T, c.hidden_size}, DType::F32, d);
  Tensor qkv = Tensor::empty({T, c.q_size() + 2 * c.kv_size()}, DType::F32, d);
  Tensor attn = Tensor::empty({T, c.num_heads, c.head_dim}, DType::F32, d);
  Tensor block_out = Tensor::empty({T, c.hidden_size}, DType::F32, d);
  Tensor gate_up = Tensor::empty({T, 2 * int64_t(c.intermediate_size)}, DType::F32, d);
  Tensor act = Tensor::empty({T, c.intermediate_size}, DType::F32, d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  // Each block adds its output into `residual`; the next one norms it on the way in.
  const float eps = static_cast<float>(c.rms_norm_eps);
  embedding(in.ids, embed_tokens, residual);
  for (int i = 0; i < c.num_layers; ++i) {
    const Layer& L = layers_[i];
    Tensor q = qkv.slice(1, 0, c.q_size()).split_last(c.num_heads);
    if (c.qk_norm) {  // q and k normed per head between the projection and the rotation
      L.qkv.normed(residual, L.attn_norm, eps, h, qkv);
      QkvHeads heads = split_qkv(qkv, c.num_heads, c.num_kv_heads, c.head_dim);
      rms_norm(q, L.q_norm, eps, q);
      rms_norm(heads.k, L.k_norm, eps, heads.k);
      rope_and_cache(heads.qk, positions, rope_, heads.k, heads.v, cache.k[i], cache.v[i], slots);
    } else {
      L.qkv.normed_rope_cache(residual, L.attn_norm, eps, h, qkv, c.num_heads, positions, rope_,
                              cache.k[i], cache.v[i], slots);
    }
    paged_attention(q, cache.k[i], cache.v[i], *meta, scale, L.sliding_window, attn);
    L.o.accumulate(attn.merge_last(), block_out, residual);
    L.gate_up.normed_silu(residual, L.ffn_norm, eps, h, gate_up, act);
    L.down.accumulate(act, block_out, residual);
  }

  // Only the rows that give logits go through the final norm, on the LM head's way in.
  Tensor rows = Tensor::empty({num_logits, c.hidden_size}, DType::F32, d);
  embedding(in.rows_wanted, residual, rows);
  Tensor logits = Tensor::empty({num_logits, c.vocab_size}, DType::F32, d);
  Tensor normed_rows = h.narrow(0, num_logits);
  rms_norm_matmul(rows, final_norm, eps, lm_head, normed_rows, logits);
  return logits;
}

}  // namespace vllm
