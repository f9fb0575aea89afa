// ModelConfig: everything the shared decoder needs to know about one checkpoint, filled from
// a Hugging Face config.json or from GGUF metadata by the architecture declarations
// (model/arch.cpp). What may differ from layer to layer lives in one LayerSpec per layer.
#pragma once
#include <optional>
#include <string>
#include <vector>

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

// The attention a layer computes (and so the cache layout it needs). MLA and linear attention
// come with their families.
enum class AttentionType { kGqa };
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
// Mixture of experts (Qwen3-MoE): a router scores num_experts gated MLPs per token (softmax),
// the top_k run and their outputs add up weighted by those scores, renormalised to sum to 1
// when norm_topk_prob. DeepSeek's grouped and biased routing and shared experts come with it.
struct MoeSpec {
  int num_experts = 0;
  int top_k = 0;
  int intermediate_size = 0;  // of each expert
  bool norm_topk_prob = false;
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
  int head_dim = 0;
  double rms_norm_eps = 1e-6;
  std::vector<LayerSpec> layers;  // [num_layers]
  MoeSpec moe;                    // the layers whose mlp is kMoe
  bool rope_neox = true;  // HF checkpoints rotate halves; GGUF llama weights are interleaved
  bool rope_ggml_theta = false;  // RoPE angles with ggml's arithmetic (GGUF files)
  bool kv_cache_f16 = false;     // f16 K/V cache (GGUF files, as llama.cpp)
  // The context the engine serves (--max-model-len; 0: max_position_embeddings). LongRoPE
  // takes its long factors when it reaches past the original context.
  int max_model_len = 0;
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
