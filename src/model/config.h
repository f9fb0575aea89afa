// ModelConfig: everything the shared decoder needs to know about one checkpoint, filled from
// a Hugging Face config.json or from GGUF metadata by the architecture declarations
// (model/arch.cpp). What may differ from layer to layer lives in one LayerSpec per layer.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace vllm {

struct RopeScaling {
  std::string type = "default";  // default | linear | llama3 | yarn | longrope
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int original_max_position_embeddings = 0;
  double beta_fast = 32.0, beta_slow = 1.0;  // yarn
  std::optional<double> attention_factor, mscale, mscale_all_dim;
  bool truncate = true;
  std::vector<double> short_factor, long_factor;  // longrope: one divisor per rotated pair
};

struct RopeSpec {
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;  // leading share of each head that rotates
  RopeScaling scaling;
};

// The attention a layer computes (and so the cache layout it needs).
enum class AttentionType {
  kGqa,  // per-head K and V rows in the cache
  kMla,  // DeepSeek's multi-head latent attention: one latent row per token (ModelConfig::mla)
};
// Multi-head latent attention (DeepSeek-V2/V3). Each token caches one row: the normed latent
// c (kv_lora_rank) and the rotated key part k_pe (qk_rope_head_dim) shared by all heads,
// stored in cache_row_width elements (>= the two; the rest is padding nothing reads). Head h's
// key is [W_UK[h] c, k_pe] and its value W_UV[h] c, where kv_b_proj = [W_UK[h]; W_UV[h]] per
// head. The decoder attends in latent space (W_UK folded into the query, W_UV applied after).
struct MlaSpec {
  int q_lora_rank = 0;  // 0: q_proj; else q_a_proj -> q_a_layernorm -> q_b_proj
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  int cache_row_width = 0;

  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int latent_width() const { return kv_lora_rank + qk_rope_head_dim; }  // of a cached row
};
// Where a layer's norms sit around each of its two blocks f (attention, MLP):
enum class NormPlacement {
  kPre,       // x + f(norm(x))                       Llama, Qwen, Phi-3, Granite
  kSandwich,  // x + post_norm(f(pre_norm(x)))        Gemma-3
  kPost,      // x + post_norm(f(x))                  OLMo-2
};
enum class QkNorm {
  kNone,
  kPerHead,  // RMSNorm of each q and k head (head_dim weights): Qwen3, Gemma-3
  kWhole,    // RMSNorm over the whole q and k projections: OLMo-2
};
enum class MlpType {
  kGated,  // down(act(gate(x)) * up(x))
  kMoe,    // a mixture of gated experts, ModelConfig::moe
};
// Mixture of experts: a router scores num_experts gated MLPs per token, the top_k run and
// their outputs add up weighted by their scores (renormalised to sum to 1 when norm_topk_prob,
// then times routed_scaling_factor), plus the shared experts' MLP when there is one.
//   Qwen3-MoE:    softmax scores, plain top-k.
//   DeepSeek-V2:  softmax scores; group_limited_greedy keeps the experts of the topk_groups
//                 groups (of num_groups) whose best expert scores highest.
//   DeepSeek-V3:  sigmoid scores; experts are chosen by score + e_score_correction_bias, in the
//                 topk_groups groups whose two best biased scores sum highest; the weights are
//                 the unbiased scores.
enum class MoeScoring { kSoftmax, kSigmoid };
enum class GroupScore { kMax, kTopTwoSum };
struct MoeSpec {
  int num_experts = 0;
  int top_k = 0;
  int intermediate_size = 0;  // of each expert
  bool norm_topk_prob = false;
  MoeScoring scoring = MoeScoring::kSoftmax;
  int num_groups = 1, topk_groups = 1;  // group-limited routing when num_groups > 1
  GroupScore group_score = GroupScore::kMax;
  bool score_correction_bias = false;   // mlp.gate.e_score_correction_bias
  double routed_scaling_factor = 1.0;
  int shared_intermediate_size = 0;     // 0: no shared experts (mlp.shared_experts.*)
};
enum class Activation { kSilu, kGeluTanh };

struct LayerSpec {
  AttentionType attention = AttentionType::kGqa;
  int sliding_window = 0;  // tokens; 0 = full attention
  RopeSpec rope;
  NormPlacement norm = NormPlacement::kPre;
  QkNorm qk_norm = QkNorm::kNone;
  bool attention_bias = false;  // q/k/v biases (Qwen2)
  MlpType mlp = MlpType::kGated;
  Activation activation = Activation::kSilu;

  int rotary_dim(int head_dim) const {
    return static_cast<int>(head_dim * rope.partial_rotary_factor);
  }
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // MLA: the rotated part of a head (qk_rope_head_dim); see mla
  double rms_norm_eps = 1e-6;
  std::vector<LayerSpec> layers;  // [num_layers]
  MoeSpec moe;                    // the layers whose mlp is kMoe
  MlaSpec mla;                    // the layers whose attention is kMla
  bool rope_neox = true;  // HF checkpoints rotate halves; GGUF llama weights are interleaved
  bool rope_ggml_theta = false;  // RoPE angles with ggml's arithmetic (GGUF files)
  bool kv_cache_f16 = false;     // f16 K/V cache (GGUF files, as llama.cpp)
  // The context the engine serves (--max-model-len; 0: max_position_embeddings). LongRoPE
  // takes its long factors when it reaches past the original context.
  int max_model_len = 0;
  // --dtype: on a GPU, the type of the weights, and so of the KV cache; unset: auto (the
  // checkpoint's float types, block types as bf16). Not set with --device cpu.
  std::optional<DType> dtype;
  // --quantization fp8: the decoder's projection weights quantized to FP8 at load, one scale
  // per tensor (WeightPlacement::quantize_fp8).
  bool quantize_fp8 = false;
  bool gelu_f16 = false;  // GELU in and out through f16, as ggml's CPU table (GGUF files)
  // q multiplied by the softmax scale before attention, as llama.cpp's Gemma-3 graph does
  // (with a power-of-two scale it differs only where q * scale is an f16 subnormal).
  bool scale_q_before_attention = false;
  bool tie_word_embeddings = false;
  // Scalars some families put on the residual stream (1 = none).
  double embedding_multiplier = 1.0;  // Gemma: sqrt(hidden_size); Granite: its own
  double residual_multiplier = 1.0;   // Granite: each block's output before the add
  double logits_multiplier = 1.0;     // Granite: 1 / logits_scaling
  std::optional<double> attention_scale;  // softmax scale; unset: 1 / sqrt(head_dim)
  double norm_weight_offset = 0.0;  // RMSNorm weights used as (offset + w): 1 for HF Gemma
  int max_position_embeddings = 4096;
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;

  int q_size() const { return num_heads * head_dim; }
  int kv_size() const { return num_kv_heads * head_dim; }
  float softmax_scale() const;
};

// inv_freq for the rotated pairs of one head, after the configured scaling, and the cos/sin
// multiplier (YaRN's and LongRoPE's attention factor; 1 otherwise). LongRoPE takes its long
// factors when the context served (max_model_len, else max_position_embeddings) reaches past
// the original one: one choice for every token, so a rotation never depends on the batch.
struct RopeTables {
  std::vector<float> inv_freq;
  float mscale = 1.0f;
};
RopeTables compute_rope_tables(const RopeSpec& rope, int head_dim, int max_position_embeddings,
                               int max_model_len = 0);

}  // namespace vllm
