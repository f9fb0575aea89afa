// ModelConfig: everything the shared decoder needs to know about one checkpoint, filled from
// a Hugging Face config.json or from GGUF metadata by the architecture declarations.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace vllm {

struct RopeScaling {
  std::string type = "default";  // default | linear | llama3 | yarn
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int original_max_position_embeddings = 0;
  double beta_fast = 32.0, beta_slow = 1.0;  // yarn
  std::optional<double> attention_factor, mscale, mscale_all_dim;
  bool truncate = true;
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
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  RopeScaling rope_scaling;
  bool rope_neox = true;  // HF checkpoints rotate halves; GGUF llama weights are interleaved
  bool rope_ggml_theta = false;  // RoPE angles with ggml's arithmetic (GGUF files)
  bool kv_cache_f16 = false;     // f16 K/V cache (GGUF files, as llama.cpp)
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2)
  bool qk_norm = false;         // per-head RMSNorm of q and k before RoPE (Qwen3)
  std::vector<int> sliding_window;  // per layer, 0 = full attention
  int max_position_embeddings = 4096;
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;

  int q_size() const { return num_heads * head_dim; }
  int kv_size() const { return num_kv_heads * head_dim; }
  int rotary_dim() const { return static_cast<int>(head_dim * partial_rotary_factor); }
};

// inv_freq for the rotated pairs of one head, after the configured scaling, and the cos/sin
// multiplier (YaRN's attention factor; 1 otherwise).
struct RopeTables {
  std::vector<float> inv_freq;
  float mscale = 1.0f;
};
RopeTables compute_rope_tables(const ModelConfig& config);

}  // namespace vllm
