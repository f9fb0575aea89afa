#include "model/arch.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "loader/gguf.h"
#include "util/check.h"

namespace vllm {
namespace {

using nlohmann::json;

template <typename T>
T get_or(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    throw Error(std::string("config.json: field \"") + key + "\" has the wrong type: " +
                it->dump());
  }
}

bool has(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && !it->is_null();
}

// A field the decoder has no code for: a load-time error, never a silently different model.
void refuse_if_set(const json& cfg, const char* key, const char* why) {
  if (has(cfg, key) && !(cfg[key].is_boolean() && !cfg[key].get<bool>()))
    throw Error(std::string("config.json: \"") + key + "\" = " + cfg[key].dump() +
                " is not supported (" + why + ")");
}

// ---- RoPE ------------------------------------------------------------------------------------

const std::set<std::string> kRopeTypes = {"default", "linear", "llama3", "yarn", "longrope"};

// One RoPE description: rope_theta plus a rope_scaling / rope_parameters object (`rs`, may be
// null). `field` names the object in errors.
RopeSpec read_rope_spec(const json& cfg, const json* rs, const char* field) {
  RopeSpec r;
  r.theta = get_or(cfg, "rope_theta", rs ? get_or(*rs, "rope_theta", 10000.0) : 10000.0);
  if (rs && has(*rs, "rope_theta")) r.theta = (*rs)["rope_theta"].get<double>();
  r.partial_rotary_factor = get_or(cfg, "partial_rotary_factor", 1.0);
  if (rs && has(*rs, "partial_rotary_factor"))
    r.partial_rotary_factor = (*rs)["partial_rotary_factor"].get<double>();
  if (!rs) return r;
  RopeScaling& s = r.scaling;
  s.type = get_or<std::string>(*rs, "rope_type", get_or<std::string>(*rs, "type", "default"));
  if (s.type == "su") s.type = "longrope";  // Phi-3's early name for it
  if (!kRopeTypes.count(s.type))
    throw Error(std::string("config.json: ") + field + " rope type '" + s.type +
                "' is not supported (have default, linear, llama3, yarn, longrope)");
  s.factor = get_or(*rs, "factor", 1.0);
  s.low_freq_factor = get_or(*rs, "low_freq_factor", 1.0);
  s.high_freq_factor = get_or(*rs, "high_freq_factor", 4.0);
  s.original_max_position_embeddings = get_or(
      *rs, "original_max_position_embeddings", get_or(cfg, "original_max_position_embeddings", 0));
  s.beta_fast = get_or(*rs, "beta_fast", 32.0);
  s.beta_slow = get_or(*rs, "beta_slow", 1.0);
  s.truncate = get_or(*rs, "truncate", true);
  if (has(*rs, "attention_factor")) s.attention_factor = (*rs)["attention_factor"].get<double>();
  if (has(*rs, "mscale")) s.mscale = (*rs)["mscale"].get<double>();
  if (has(*rs, "mscale_all_dim")) s.mscale_all_dim = (*rs)["mscale_all_dim"].get<double>();
  s.short_factor = get_or(*rs, "short_factor", std::vector<double>{});
  s.long_factor = get_or(*rs, "long_factor", std::vector<double>{});
  if (s.type == "longrope" && (s.short_factor.empty() || s.long_factor.empty() ||
                               s.original_max_position_embeddings <= 0))
    throw Error(std::string("config.json: ") + field +
                " longrope needs short_factor, long_factor and "
                "original_max_position_embeddings");
  return r;
}

// The RoPE of each layer type: transformers 5 writes rope_parameters, either one object or one
// per layer type ({"full_attention": {...}, "sliding_attention": {...}}); published checkpoints
// carry rope_theta + rope_scaling. Keys: layer type, or "" for all types.
std::map<std::string, RopeSpec> read_ropes(const json& cfg) {
  std::map<std::string, RopeSpec> out;
  if (auto it = cfg.find("rope_parameters"); it != cfg.end() && it->is_object()) {
    bool per_type = false;
    for (const auto& [k, v] : it->items())
      if (v.is_object()) {
        per_type = true;
        const std::string field = "rope_parameters." + k;
        out[k] = read_rope_spec(cfg, &v, field.c_str());
      }
    if (!per_type) out[""] = read_rope_spec(cfg, &*it, "rope_parameters");
    return out;
  }
  const json* rs = nullptr;
  if (auto it = cfg.find("rope_scaling"); it != cfg.end() && it->is_object()) rs = &*it;
  out[""] = read_rope_spec(cfg, rs, "rope_scaling");
  return out;
}

// ---- layer types -------------------------------------------------------------------------------

// layer_types (transformers 5, Gemma-3, Qwen2): "full_attention" or "sliding_attention" per
// layer; empty when the config has none.
std::vector<std::string> read_layer_types(const json& cfg, int num_layers) {
  std::vector<std::string> types;
  auto it = cfg.find("layer_types");
  if (it == cfg.end() || it->is_null()) return types;
  if (!it->is_array() || static_cast<int>(it->size()) != num_layers)
    throw Error("config.json: layer_types must list one type per layer (" +
                std::to_string(num_layers) + ")");
  for (const auto& t : *it) {
    const std::string s = t.is_string() ? t.get<std::string>() : t.dump();
    if (s != "full_attention" && s != "sliding_attention")
      throw Error("config.json: layer_types has unknown layer type '" + s +
                  "' (have full_attention, sliding_attention)");
    types.push_back(s);
  }
  return types;
}

int positive_window(const json& cfg) {
  const int w = get_or(cfg, "sliding_window", 0);
  if (w <= 0)
    throw Error("config.json: sliding_window must be positive for sliding_attention layers, got " +
                std::to_string(w));
  return w;
}

// Sets each layer's window and RoPE from its type.
void apply_layer_types(const json& cfg, const std::vector<std::string>& types, ModelConfig& c) {
  const auto ropes = read_ropes(cfg);
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string& t = types.empty() ? std::string("full_attention") : types[i];
    LayerSpec& L = c.layers[i];
    L.sliding_window = t == "sliding_attention" ? positive_window(cfg) : 0;
    if (auto r = ropes.find(t); r != ropes.end()) L.rope = r->second;
    else if (auto all = ropes.find(""); all != ropes.end()) L.rope = all->second;
    else throw Error("config.json: rope_parameters has no entry for layer type " + t);
  }
}

void all_layers(ModelConfig& c, auto&& edit) {
  for (LayerSpec& L : c.layers) edit(L);
}

Activation activation_named(const std::string& name, const char* field) {
  if (name == "silu" || name == "swish") return Activation::kSilu;
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_fast")
    return Activation::kGeluTanh;
  throw Error(std::string("config.json: ") + field + " '" + name +
              "' is not supported (have silu, gelu_pytorch_tanh)");
}

// ---- families ----------------------------------------------------------------------------------

void llama_hf(const json& cfg, ModelConfig& c) {
  const Activation a = activation_named(get_or<std::string>(cfg, "hidden_act", "silu"),
                                        "hidden_act");
  all_layers(c, [&](LayerSpec& L) { L.activation = a; });
}

// Every layer windowed when sliding_window is set (Mistral, Phi-3).
void all_windowed_hf(const json& cfg, ModelConfig& c) {
  llama_hf(cfg, c);
  if (!has(cfg, "layer_types") && get_or(cfg, "sliding_window", 0) > 0)
    all_layers(c, [&](LayerSpec& L) { L.sliding_window = cfg["sliding_window"].get<int>(); });
}

// Qwen2/Qwen3: sliding attention only when enabled, from max_window_layers on.
void qwen_windows(const json& cfg, ModelConfig& c) {
  if (has(cfg, "layer_types") || !get_or(cfg, "use_sliding_window", false)) return;
  const int window = positive_window(cfg);
  for (int i = get_or(cfg, "max_window_layers", c.num_layers); i < c.num_layers; ++i)
    c.layers[i].sliding_window = window;
}

void qwen2_hf(const json& cfg, ModelConfig& c) {
  llama_hf(cfg, c);
  const bool bias = get_or(cfg, "attention_bias", true);
  all_layers(c, [&](LayerSpec& L) { L.attention_bias = bias; });
  qwen_windows(cfg, c);
}

void qwen3_hf(const json& cfg, ModelConfig& c) {
  llama_hf(cfg, c);
  all_layers(c, [](LayerSpec& L) { L.qk_norm = QkNorm::kPerHead; });
  qwen_windows(cfg, c);
}

// The sizes every mixture of experts has. Published checkpoints say num_experts (Qwen) or
// n_routed_experts (DeepSeek); transformers 5 writes num_local_experts.
void read_moe_sizes(const json& cfg, MoeSpec& m) {
  m.num_experts = get_or(cfg, "num_experts",
                         get_or(cfg, "n_routed_experts", get_or(cfg, "num_local_experts", 0)));
  m.top_k = get_or(cfg, "num_experts_per_tok", 0);
  m.intermediate_size = get_or(cfg, "moe_intermediate_size", 0);
  m.norm_topk_prob = get_or(cfg, "norm_topk_prob", false);
  if (m.num_experts <= 0 || m.top_k <= 0 || m.top_k > m.num_experts || m.intermediate_size <= 0)
    throw Error("config.json: the number of experts, num_experts_per_tok (1..experts) and "
                "moe_intermediate_size must be positive");
}

// Qwen3-MoE: Qwen3's attention; every decoder_sparse_step-th layer not in mlp_only_layers is
// a mixture of experts.
void qwen3_moe_hf(const json& cfg, ModelConfig& c) {
  qwen3_hf(cfg, c);
  refuse_if_set(cfg, "shared_expert_intermediate_size", "shared experts (Qwen2-MoE)");
  read_moe_sizes(cfg, c.moe);
  const int step = get_or(cfg, "decoder_sparse_step", 1);
  if (step <= 0) throw Error("config.json: decoder_sparse_step must be positive");
  const auto dense = get_or(cfg, "mlp_only_layers", std::vector<int>{});
  for (int i = 0; i < c.num_layers; ++i)
    if (std::find(dense.begin(), dense.end(), i) == dense.end() && (i + 1) % step == 0)
      c.layers[i].mlp = MlpType::kMoe;
}

int positive_field(const json& cfg, const char* key) {
  const int v = get_or(cfg, key, 0);
  if (v <= 0)
    throw Error(std::string("config.json: ") + key + " must be positive, got " +
                (has(cfg, key) ? cfg[key].dump() : std::string("nothing")));
  return v;
}

// DeepSeek's multi-head latent attention on every layer. The row a token caches may be stored
// wider than it is (kv_cache_padded_dim, our own field: docs/model_configs.md).
void deepseek_mla(const json& cfg, ModelConfig& c) {
  refuse_if_set(cfg, "attention_bias", "biases on the MLA projections");
  MlaSpec& m = c.mla;
  m.q_lora_rank = get_or(cfg, "q_lora_rank", 0);
  if (m.q_lora_rank < 0) throw Error("config.json: q_lora_rank must not be negative");
  m.kv_lora_rank = positive_field(cfg, "kv_lora_rank");
  m.qk_nope_head_dim = positive_field(cfg, "qk_nope_head_dim");
  m.qk_rope_head_dim = positive_field(cfg, "qk_rope_head_dim");
  m.v_head_dim = positive_field(cfg, "v_head_dim");
  m.cache_row_width = get_or(cfg, "kv_cache_padded_dim", m.latent_width());
  if (m.cache_row_width < m.latent_width())
    throw Error("config.json: kv_cache_padded_dim " + std::to_string(m.cache_row_width) +
                " is below kv_lora_rank + qk_rope_head_dim = " +
                std::to_string(m.latent_width()));
  // The rotary part is what RoPE and the layer specs see as a head; the latent is one
  // key/value "head" shared by all query heads.
  c.head_dim = m.qk_rope_head_dim;
  c.num_kv_heads = 1;
  all_layers(c, [](LayerSpec& L) { L.attention = AttentionType::kMla; });
  // transformers' softmax scale: qk_head_dim^-0.5, times YaRN's mscale(mscale_all_dim)^2.
  double scale = 1.0 / std::sqrt(double(m.qk_head_dim()));
  const RopeScaling& s = c.layers[0].rope.scaling;
  if (s.type != "default" && s.mscale_all_dim && *s.mscale_all_dim != 0 && s.factor > 1) {
    const double ms = 0.1 * *s.mscale_all_dim * std::log(s.factor) + 1.0;
    scale *= ms * ms;
  }
  c.attention_scale = scale;
}

// DeepSeek's MoE layers: from first_k_dense_replace on, every moe_layer_freq-th layer, with
// shared experts and scaled routed weights.
void deepseek_moe(const json& cfg, ModelConfig& c) {
  MoeSpec& m = c.moe;
  read_moe_sizes(cfg, m);
  m.routed_scaling_factor = get_or(cfg, "routed_scaling_factor", 1.0);
  m.shared_intermediate_size = get_or(cfg, "n_shared_experts", 0) * m.intermediate_size;
  const int first_dense = get_or(cfg, "first_k_dense_replace", 0);
  const int freq = get_or(cfg, "moe_layer_freq", 1);
  if (first_dense < 0 || freq <= 0)
    throw Error("config.json: first_k_dense_replace must not be negative, moe_layer_freq positive");
  for (int i = first_dense; i < c.num_layers; ++i)
    if (i % freq == 0) c.layers[i].mlp = MlpType::kMoe;
}

void group_limited(const json& cfg, MoeSpec& m) {
  m.num_groups = positive_field(cfg, "n_group");
  m.topk_groups = positive_field(cfg, "topk_group");
  if (m.num_experts % m.num_groups || m.topk_groups > m.num_groups ||
      m.top_k > m.topk_groups * (m.num_experts / m.num_groups))
    throw Error("config.json: n_group " + std::to_string(m.num_groups) + " / topk_group " +
                std::to_string(m.topk_groups) + " do not fit " + std::to_string(m.num_experts) +
                " experts choosing " + std::to_string(m.top_k));
}

void deepseek_v2_hf(const json& cfg, ModelConfig& c) {
  llama_hf(cfg, c);
  deepseek_mla(cfg, c);
  c.rope_neox = false;  // pairs (2i, 2i + 1), as complex numbers
  deepseek_moe(cfg, c);
  const auto method = get_or<std::string>(cfg, "topk_method", "greedy");
  if (method == "group_limited_greedy") group_limited(cfg, c.moe);
  else if (method != "greedy")
    throw Error("config.json: DeepSeek-V2 topk_method '" + method +
                "' is not supported (have greedy, group_limited_greedy)");
  if (auto f = get_or<std::string>(cfg, "scoring_func", "softmax"); f != "softmax")
    throw Error("config.json: DeepSeek-V2 scoring_func '" + f + "' is not supported (softmax)");
}

void deepseek_v3_hf(const json& cfg, ModelConfig& c) {
  llama_hf(cfg, c);
  deepseek_mla(cfg, c);
  c.rope_neox = !get_or(cfg, "rope_interleave", true);
  deepseek_moe(cfg, c);
  if (auto t = get_or<std::string>(cfg, "topk_method", "noaux_tc"); t != "noaux_tc")
    throw Error("config.json: DeepSeek-V3 topk_method '" + t + "' is not supported (noaux_tc)");
  if (auto f = get_or<std::string>(cfg, "scoring_func", "sigmoid"); f != "sigmoid")
    throw Error("config.json: DeepSeek-V3 scoring_func '" + f + "' is not supported (sigmoid)");
  MoeSpec& m = c.moe;
  m.scoring = MoeScoring::kSigmoid;
  m.score_correction_bias = true;
  m.group_score = GroupScore::kTopTwoSum;
  group_limited(cfg, m);
  if (m.num_experts / m.num_groups < 2)
    throw Error("config.json: DeepSeek-V3 routing needs at least 2 experts per group");
}

void gemma3_hf(const json& cfg, ModelConfig& c) {
  refuse_if_set(cfg, "final_logit_softcapping", "logit soft-capping");
  refuse_if_set(cfg, "attn_logit_softcapping", "attention soft-capping");
  refuse_if_set(cfg, "use_bidirectional_attention", "bidirectional attention");
  const Activation a = activation_named(
      get_or<std::string>(cfg, "hidden_activation",
                          get_or<std::string>(cfg, "hidden_act", "gelu_pytorch_tanh")),
      "hidden_activation");
  if (!has(cfg, "layer_types")) {  // before transformers 5: every Nth layer is global
    const int pattern = get_or(cfg, "sliding_window_pattern", 6);
    if (pattern <= 0) throw Error("config.json: sliding_window_pattern must be positive");
    const int window = positive_window(cfg);
    for (int i = 0; i < c.num_layers; ++i)
      c.layers[i].sliding_window = (i + 1) % pattern ? window : 0;
  }
  if (!has(cfg, "rope_parameters")) {  // local layers: their own base, no scaling
    RopeSpec local;
    local.theta = get_or(cfg, "rope_local_base_freq", 10000.0);
    for (LayerSpec& L : c.layers)
      if (L.sliding_window > 0) L.rope = local;
  }
  all_layers(c, [&](LayerSpec& L) {
    L.norm = NormPlacement::kSandwich;
    L.qk_norm = QkNorm::kPerHead;
    L.activation = a;
  });
  c.norm_weight_offset = 1.0;
  c.embedding_multiplier = std::sqrt(static_cast<double>(c.hidden_size));
  c.attention_scale = 1.0 / std::sqrt(get_or(cfg, "query_pre_attn_scalar", double(c.head_dim)));
  c.tie_word_embeddings = get_or(cfg, "tie_word_embeddings", true);
}

void olmo2_hf(const json& cfg, ModelConfig& c) {
  llama_hf(cfg, c);
  all_layers(c, [](LayerSpec& L) {
    L.norm = NormPlacement::kPost;
    L.qk_norm = QkNorm::kWhole;
  });
}

void granite_hf(const json& cfg, ModelConfig& c) {
  llama_hf(cfg, c);
  c.embedding_multiplier = get_or(cfg, "embedding_multiplier", 1.0);
  c.residual_multiplier = get_or(cfg, "residual_multiplier", 1.0);
  c.attention_scale = get_or(cfg, "attention_multiplier", 1.0 / std::sqrt(double(c.head_dim)));
  const double logits_scaling = get_or(cfg, "logits_scaling", 1.0);
  if (logits_scaling == 0) throw Error("config.json: logits_scaling must not be 0");
  c.logits_multiplier = 1.0 / logits_scaling;
}

void plain_gguf(const GgufFile&, const std::string&, ModelConfig&) {}

void qwen2_gguf(const GgufFile&, const std::string&, ModelConfig& c) {
  all_layers(c, [](LayerSpec& L) { L.attention_bias = true; });
}

void qwen3_gguf(const GgufFile&, const std::string&, ModelConfig& c) {
  all_layers(c, [](LayerSpec& L) { L.qk_norm = QkNorm::kPerHead; });
}

// llama.cpp's Gemma-3: every sixth layer global, local layers on base 10,000, the norm weights
// stored with their +1 already added, attention scaled by 1/sqrt(key_length).
void gemma3_gguf(const GgufFile& g, const std::string& a, ModelConfig& c) {
  const auto window = g.get_int(a + ".attention.sliding_window");
  if (!window || *window <= 0)
    throw Error(g.path() + ": " + a + ".attention.sliding_window must be positive");
  RopeSpec local;
  local.theta = g.get_float(a + ".rope.freq_base_swa").value_or(10000.0);
  local.partial_rotary_factor = c.layers[0].rope.partial_rotary_factor;
  for (int i = 0; i < c.num_layers; ++i) {
    LayerSpec& L = c.layers[i];
    L.norm = NormPlacement::kSandwich;
    L.qk_norm = QkNorm::kPerHead;
    L.activation = Activation::kGeluTanh;
    if ((i + 1) % 6) {
      L.sliding_window = static_cast<int>(*window);
      L.rope = local;
    }
  }
  c.embedding_multiplier = std::sqrt(static_cast<double>(c.hidden_size));
  c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  c.scale_q_before_attention = true;
  // A chat turn ends with <end_of_turn>, which the metadata does not name (llama.cpp finds
  // it by its text too).
  const auto tokens = g.get_string_array("tokenizer.ggml.tokens");
  for (size_t id = 0; id < tokens.size(); ++id)
    if (tokens[id] == "<end_of_turn>") c.eos_token_ids.push_back(static_cast<int>(id));
}

// llama.cpp's deepseek2 (DeepSeek-V2 and V3): MLA with kv_b_proj split per head into
// attn_k_b / attn_v_b, key_length = the cached row (kv_lora_rank + rope dims) and
// key_length_mla / value_length_mla the per-head sizes; experts under expert_* keys, the
// gating function 1 = softmax, 2 = sigmoid (with exp_probs_b as V3's correction bias).
void deepseek2_gguf(const GgufFile& g, const std::string& a, ModelConfig& c) {
  auto need = [&](const std::string& key) -> int {
    auto v = g.get_int(a + "." + key);
    if (!v || *v < 0) throw Error(g.path() + ": missing metadata " + a + "." + key);
    return static_cast<int>(*v);
  };
  MlaSpec& m = c.mla;
  m.q_lora_rank = static_cast<int>(g.get_int(a + ".attention.q_lora_rank").value_or(0));
  m.kv_lora_rank = need("attention.kv_lora_rank");
  m.qk_rope_head_dim = need("rope.dimension_count");
  m.qk_nope_head_dim = need("attention.key_length_mla") - m.qk_rope_head_dim;
  m.v_head_dim = need("attention.value_length_mla");
  m.cache_row_width = m.latent_width();
  if (m.kv_lora_rank <= 0 || m.qk_rope_head_dim <= 0 || m.qk_nope_head_dim <= 0 ||
      m.v_head_dim <= 0)
    throw Error(g.path() + ": MLA sizes (kv_lora_rank, rope.dimension_count, key_length_mla, "
                "value_length_mla) must be positive");
  c.head_dim = m.qk_rope_head_dim;
  c.num_kv_heads = 1;
  c.rope_neox = false;  // llama.cpp rotates deepseek2's pairs (2i, 2i + 1)
  // llama.cpp's kq_scale: qk_head_dim^-0.5 times mscale^2, mscale = 1 + 0.1 x
  // mscale_all_dim x ln(factor); the file stores 0.1 x mscale_all_dim as yarn_log_multiplier.
  double scale = 1.0 / std::sqrt(double(m.qk_head_dim()));
  const RopeScaling& s = c.layers[0].rope.scaling;
  if (s.type == "yarn") {
    const double ms =
        1.0 + g.get_float(a + ".rope.scaling.yarn_log_multiplier").value_or(0.0) *
                  std::log(s.factor);
    scale *= ms * ms;
  }
  c.attention_scale = scale;
  for (LayerSpec& L : c.layers) {
    L.attention = AttentionType::kMla;
    L.rope.partial_rotary_factor = 1.0;
  }
  MoeSpec& e = c.moe;
  e.num_experts = need("expert_count");
  e.top_k = need("expert_used_count");
  e.intermediate_size = need("expert_feed_forward_length");
  e.shared_intermediate_size =
      static_cast<int>(g.get_int(a + ".expert_shared_count").value_or(0)) * e.intermediate_size;
  e.norm_topk_prob = g.get_bool(a + ".expert_weights_norm").value_or(false);
  e.routed_scaling_factor = g.get_float(a + ".expert_weights_scale").value_or(1.0);
  if (e.routed_scaling_factor == 0) e.routed_scaling_factor = 1.0;  // llama.cpp: 0 = unset
  const int64_t gating = g.get_int(a + ".expert_gating_func").value_or(1);
  if (gating == 2) {
    e.scoring = MoeScoring::kSigmoid;
    e.group_score = GroupScore::kTopTwoSum;
    e.score_correction_bias = g.find("blk." + std::to_string(c.num_layers - 1) +
                                     ".exp_probs_b.bias") != nullptr;
  } else if (gating != 1) {
    throw Error(g.path() + ": " + a + ".expert_gating_func " + std::to_string(gating) +
                " is not supported (1 softmax, 2 sigmoid)");
  }
  e.num_groups = static_cast<int>(g.get_int(a + ".expert_group_count").value_or(1));
  e.topk_groups = static_cast<int>(g.get_int(a + ".expert_group_used_count").value_or(1));
  if (e.num_experts <= 0 || e.top_k <= 0 || e.top_k > e.num_experts ||
      e.intermediate_size <= 0 || e.num_groups <= 0 || e.num_experts % e.num_groups ||
      e.topk_groups <= 0 || e.topk_groups > e.num_groups)
    throw Error(g.path() + ": expert_count, expert_used_count, expert_feed_forward_length and "
                "the expert groups do not fit together");
  const int dense = static_cast<int>(g.get_int(a + ".leading_dense_block_count").value_or(0));
  for (int i = dense; i < c.num_layers; ++i) c.layers[i].mlp = MlpType::kMoe;
}

// llama.cpp's qwen3moe: Qwen3's attention, every layer a mixture of experts whose weights
// llama.cpp always renormalises (build_moe_ffn with norm_w), scaled by expert_weights_scale.
void qwen3moe_gguf(const GgufFile& g, const std::string& a, ModelConfig& c) {
  qwen3_gguf(g, a, c);
  MoeSpec& e = c.moe;
  e.num_experts = static_cast<int>(g.get_int(a + ".expert_count").value_or(0));
  e.top_k = static_cast<int>(g.get_int(a + ".expert_used_count").value_or(0));
  e.intermediate_size = static_cast<int>(g.get_int(a + ".expert_feed_forward_length")
                                             .value_or(e.top_k > 0 ? c.intermediate_size / e.top_k : 0));
  if (e.num_experts <= 0 || e.top_k <= 0 || e.top_k > e.num_experts || e.intermediate_size <= 0)
    throw Error(g.path() + ": " + a + ".expert_count, expert_used_count (1..experts) and "
                "expert_feed_forward_length must be positive");
  e.norm_topk_prob = true;
  e.routed_scaling_factor = g.get_float(a + ".expert_weights_scale").value_or(1.0);
  if (e.routed_scaling_factor == 0) e.routed_scaling_factor = 1.0;  // llama.cpp: 0 = unset
  all_layers(c, [](LayerSpec& L) { L.mlp = MlpType::kMoe; });
}

constexpr ArchSpec kArchs[] = {
    {"LlamaForCausalLM", "llama", llama_hf, plain_gguf},
    {"MistralForCausalLM", "", all_windowed_hf, nullptr},
    {"Qwen2ForCausalLM", "qwen2", qwen2_hf, qwen2_gguf},
    {"Qwen3ForCausalLM", "qwen3", qwen3_hf, qwen3_gguf},
    {"Qwen3MoeForCausalLM", "qwen3moe", qwen3_moe_hf, qwen3moe_gguf},
    {"DeepseekV2ForCausalLM", "deepseek2", deepseek_v2_hf, deepseek2_gguf},
    {"DeepseekV3ForCausalLM", "", deepseek_v3_hf, nullptr},
    {"Gemma3ForCausalLM", "gemma3", gemma3_hf, gemma3_gguf},
    {"Phi3ForCausalLM", "", all_windowed_hf, nullptr},
    {"Olmo2ForCausalLM", "", olmo2_hf, nullptr},
    {"GraniteForCausalLM", "", granite_hf, nullptr},
};

void read_eos(const json& j, ModelConfig& c) {
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return;
  c.eos_token_ids.clear();
  if (it->is_array())
    for (const auto& v : *it) c.eos_token_ids.push_back(v.get<int>());
  else
    c.eos_token_ids.push_back(it->get<int>());
}

// What every layer description must satisfy, whatever filled it.
void validate(const ModelConfig& c, const std::string& where) {
  auto bad = [&](const std::string& what) { throw Error(where + ": " + what); };
  if (c.num_layers <= 0 || c.hidden_size <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 ||
      c.head_dim <= 0 || c.vocab_size <= 0 || c.intermediate_size <= 0)
    bad("model sizes must be positive");
  if (c.num_heads % c.num_kv_heads)
    bad("num_attention_heads " + std::to_string(c.num_heads) +
        " is not a multiple of num_key_value_heads " + std::to_string(c.num_kv_heads));
  if (static_cast<int>(c.layers.size()) != c.num_layers) bad("one layer spec per layer");
  for (const LayerSpec& L : c.layers) {
    if (L.sliding_window < 0) bad("sliding_window must not be negative");
    const int rot = L.rotary_dim(c.head_dim);
    if (rot <= 0 || rot > c.head_dim || rot % 2)
      bad("partial_rotary_factor " + std::to_string(L.rope.partial_rotary_factor) +
          " gives rotary dims " + std::to_string(rot) + " of head_dim " +
          std::to_string(c.head_dim));
    const RopeScaling& s = L.rope.scaling;
    if (s.type == "longrope" &&
        (static_cast<int>(s.short_factor.size()) != rot / 2 ||
         static_cast<int>(s.long_factor.size()) != rot / 2))
      bad("longrope short_factor / long_factor need " + std::to_string(rot / 2) + " entries");
  }
}

}  // namespace

float ModelConfig::softmax_scale() const {
  return static_cast<float>(attention_scale.value_or(1.0 / std::sqrt(double(head_dim))));
}

const ArchSpec* find_arch(std::string_view hf_name) {
  for (const ArchSpec& a : kArchs)
    if (a.hf_name == hf_name) return &a;
  return nullptr;
}

ModelConfig config_from_hf(const json& cfg, const json& gen) {
  ModelConfig c;
  auto archs = cfg.find("architectures");
  if (archs == cfg.end() || !archs->is_array() || archs->empty())
    throw Error("config.json has no \"architectures\" entry");
  c.architecture = (*archs)[0].get<std::string>();
  const ArchSpec* arch = find_arch(c.architecture);
  if (!arch) throw Error("unsupported architecture " + c.architecture);
  try {
    c.vocab_size = cfg.at("vocab_size").get<int>();
    c.hidden_size = cfg.at("hidden_size").get<int>();
    c.intermediate_size = cfg.at("intermediate_size").get<int>();
    c.num_layers = cfg.at("num_hidden_layers").get<int>();
    c.num_heads = cfg.at("num_attention_heads").get<int>();
  } catch (const json::exception& e) {
    throw Error(std::string("config.json: ") + e.what());
  }
  if (c.num_layers <= 0 || c.num_heads <= 0)
    throw Error("config.json: num_hidden_layers and num_attention_heads must be positive");
  c.num_kv_heads = get_or(cfg, "num_key_value_heads", c.num_heads);
  c.head_dim = get_or(cfg, "head_dim", c.hidden_size / c.num_heads);
  c.rms_norm_eps = get_or(cfg, "rms_norm_eps", 1e-6);
  c.max_position_embeddings = get_or(cfg, "max_position_embeddings", 4096);
  c.tie_word_embeddings = get_or(cfg, "tie_word_embeddings", false);
  refuse_if_set(cfg, "mlp_bias", "biases on the MLP projections");
  LayerSpec base;
  base.attention_bias = get_or(cfg, "attention_bias", false);
  c.layers.assign(c.num_layers, base);
  apply_layer_types(cfg, read_layer_types(cfg, c.num_layers), c);
  arch->from_hf(cfg, c);
  if (auto it = cfg.find("bos_token_id"); it != cfg.end() && it->is_number())
    c.bos_token_id = it->get<int>();
  read_eos(cfg, c);
  if (gen.is_object()) read_eos(gen, c);
  validate(c, "config.json");
  return c;
}

ModelConfig config_from_gguf(const GgufFile& g) {
  const std::string a = g.get_string("general.architecture").value_or("");
  const ArchSpec* arch = nullptr;
  for (const ArchSpec& s : kArchs)
    if (!s.gguf_name.empty() && s.gguf_name == a) arch = &s;
  if (!arch) throw Error(g.path() + ": unsupported GGUF architecture '" + a + "'");
  auto need = [&](const std::string& key) -> int64_t {
    auto v = g.get_int(a + "." + key);
    if (!v) throw Error(g.path() + ": missing metadata " + a + "." + key);
    return *v;
  };
  ModelConfig c;
  c.architecture = std::string(arch->hf_name);
  c.hidden_size = static_cast<int>(need("embedding_length"));
  c.intermediate_size = static_cast<int>(need("feed_forward_length"));
  c.num_layers = static_cast<int>(need("block_count"));
  c.num_heads = static_cast<int>(need("attention.head_count"));
  if (c.num_layers <= 0 || c.num_heads <= 0)
    throw Error(g.path() + ": block_count and attention.head_count must be positive");
  c.num_kv_heads = static_cast<int>(g.get_int(a + ".attention.head_count_kv").value_or(c.num_heads));
  c.head_dim = static_cast<int>(
      g.get_int(a + ".attention.key_length").value_or(c.hidden_size / c.num_heads));
  c.rms_norm_eps = g.get_float(a + ".attention.layer_norm_rms_epsilon").value_or(1e-5);
  RopeSpec rope;
  rope.theta = g.get_float(a + ".rope.freq_base").value_or(10000.0);
  const int64_t rot = g.get_int(a + ".rope.dimension_count").value_or(c.head_dim);
  rope.partial_rotary_factor = double(rot) / c.head_dim;
  c.max_position_embeddings = static_cast<int>(g.get_int(a + ".context_length").value_or(4096));
  if (auto t = g.get_string(a + ".rope.scaling.type"); t && *t != "none") {
    rope.scaling.type = *t;
    rope.scaling.factor = g.get_float(a + ".rope.scaling.factor").value_or(1.0);
    rope.scaling.original_max_position_embeddings = static_cast<int>(
        g.get_int(a + ".rope.scaling.original_context_length").value_or(0));
  }
  if (rope.scaling.type != "default" && rope.scaling.type != "linear" &&
      rope.scaling.type != "yarn")
    throw Error(g.path() + ": GGUF rope scaling '" + rope.scaling.type +
                "' is not supported (have none, linear, yarn)");
  if (rope.scaling.type == "yarn" && a != "deepseek2")  // checked against llama.cpp for it only
    throw Error(g.path() + ": GGUF YaRN RoPE scaling is supported for deepseek2 files only");
  if (rope.scaling.type == "yarn") {
    RopeScaling& s = rope.scaling;
    if (s.factor <= 1.0 || s.original_max_position_embeddings <= 0)
      throw Error(g.path() + ": YaRN needs rope.scaling.factor > 1 and "
                  "rope.scaling.original_context_length");
    s.beta_fast = g.get_float(a + ".rope.scaling.yarn_beta_fast").value_or(32.0);
    s.beta_slow = g.get_float(a + ".rope.scaling.yarn_beta_slow").value_or(1.0);
    // The rotation keeps unit length (llama.cpp's attn_factor 1); families scale attention.
    s.attention_factor = g.get_float(a + ".rope.scaling.attn_factor").value_or(1.0);
  }
  LayerSpec base;
  base.rope = rope;
  c.layers.assign(c.num_layers, base);
  // llama.cpp's converter permutes q/k rows so that rotated pairs are adjacent.
  c.rope_neox = arch->gguf_name != "llama";
  c.rope_ggml_theta = true;
  c.kv_cache_f16 = true;
  c.gelu_f16 = true;
  c.tie_word_embeddings = g.find("output.weight") == nullptr;
  const auto* embd = g.find("token_embd.weight");
  if (!embd) throw Error(g.path() + ": no token_embd.weight tensor");
  c.vocab_size = static_cast<int>(embd->shape[0]);
  if (auto v = g.get_int("tokenizer.ggml.bos_token_id")) c.bos_token_id = static_cast<int>(*v);
  if (auto v = g.get_int("tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(static_cast<int>(*v));
  if (auto v = g.get_int("tokenizer.ggml.eot_token_id"); v && (c.eos_token_ids.empty() || *v != c.eos_token_ids[0]))
    c.eos_token_ids.push_back(static_cast<int>(*v));
  arch->from_gguf(g, a, c);
  validate(c, g.path());
  return c;
}

}  // namespace vllm
