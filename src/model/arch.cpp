#include "model/arch.h"

#include "loader/gguf.h"
#include "util/check.h"

namespace vllm {
namespace {

constexpr ArchSpec kArchs[] = {
    {"LlamaForCausalLM", "llama", false, false, false},
    {"MistralForCausalLM", "", false, false, true},
    {"Qwen2ForCausalLM", "qwen2", true, false, true},
    {"Qwen3ForCausalLM", "qwen3", false, true, true},
};

template <typename T>
T get_or(const nlohmann::json& j, const char* key, T fallback) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : it->get<T>();
}

void read_rope(const nlohmann::json& cfg, ModelConfig& c) {
  // Newer transformers nest everything under rope_parameters; older use rope_theta + rope_scaling.
  const nlohmann::json* rs = nullptr;
  if (auto it = cfg.find("rope_parameters"); it != cfg.end() && it->is_object()) rs = &*it;
  if (auto it = cfg.find("rope_scaling"); !rs && it != cfg.end() && it->is_object()) rs = &*it;
  c.rope_theta = get_or(cfg, "rope_theta", rs ? get_or(*rs, "rope_theta", 10000.0) : 10000.0);
  c.partial_rotary_factor = get_or(cfg, "partial_rotary_factor", 1.0);
  if (!rs) return;
  RopeScaling& s = c.rope_scaling;
  s.type = get_or<std::string>(*rs, "rope_type", get_or<std::string>(*rs, "type", "default"));
  s.factor = get_or(*rs, "factor", 1.0);
  s.low_freq_factor = get_or(*rs, "low_freq_factor", 1.0);
  s.high_freq_factor = get_or(*rs, "high_freq_factor", 4.0);
  s.original_max_position_embeddings = get_or(*rs, "original_max_position_embeddings", 0);
  s.beta_fast = get_or(*rs, "beta_fast", 32.0);
  s.beta_slow = get_or(*rs, "beta_slow", 1.0);
  s.truncate = get_or(*rs, "truncate", true);
  if (rs->contains("attention_factor") && !(*rs)["attention_factor"].is_null())
    s.attention_factor = (*rs)["attention_factor"].get<double>();
  if (rs->contains("mscale") && !(*rs)["mscale"].is_null()) s.mscale = (*rs)["mscale"].get<double>();
  if (rs->contains("mscale_all_dim") && !(*rs)["mscale_all_dim"].is_null())
    s.mscale_all_dim = (*rs)["mscale_all_dim"].get<double>();
}

void read_eos(const nlohmann::json& j, ModelConfig& c) {
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return;
  c.eos_token_ids.clear();
  if (it->is_array())
    for (const auto& v : *it) c.eos_token_ids.push_back(v.get<int>());
  else
    c.eos_token_ids.push_back(it->get<int>());
}

void read_sliding_window(const nlohmann::json& cfg, const ArchSpec& arch, ModelConfig& c) {
  c.sliding_window.assign(c.num_layers, 0);
  const int window = get_or(cfg, "sliding_window", 0);
  if (!arch.sliding_window || window <= 0) return;
  if (auto it = cfg.find("layer_types"); it != cfg.end() && it->is_array()) {
    VLLM_CHECK(static_cast<int>(it->size()) == c.num_layers, "layer_types length");
    for (int i = 0; i < c.num_layers; ++i)
      if ((*it)[i].get<std::string>() == "sliding_attention") c.sliding_window[i] = window;
    return;
  }
  if (arch.hf_name == "MistralForCausalLM") {
    c.sliding_window.assign(c.num_layers, window);
    return;
  }
  // Qwen2/Qwen3: sliding attention only when enabled, from max_window_layers on.
  if (!get_or(cfg, "use_sliding_window", false)) return;
  const int first = get_or(cfg, "max_window_layers", c.num_layers);
  for (int i = first; i < c.num_layers; ++i) c.sliding_window[i] = window;
}

}  // namespace

const ArchSpec* find_arch(std::string_view hf_name) {
  for (const ArchSpec& a : kArchs)
    if (a.hf_name == hf_name) return &a;
  return nullptr;
}

const ArchSpec& arch_of(const ModelConfig& config) {
  const ArchSpec* a = find_arch(config.architecture);
  VLLM_CHECK(a, "unknown architecture ", config.architecture);
  return *a;
}

ModelConfig config_from_hf(const nlohmann::json& cfg, const nlohmann::json& gen) {
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
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("config.json: ") + e.what());
  }
  c.num_kv_heads = get_or(cfg, "num_key_value_heads", c.num_heads);
  c.head_dim = get_or(cfg, "head_dim", c.hidden_size / c.num_heads);
  c.rms_norm_eps = get_or(cfg, "rms_norm_eps", 1e-6);
  c.max_position_embeddings = get_or(cfg, "max_position_embeddings", 4096);
  c.tie_word_embeddings = get_or(cfg, "tie_word_embeddings", false);
  c.attention_bias = get_or(cfg, "attention_bias", arch->attention_bias);
  c.qk_norm = arch->qk_norm;
  read_rope(cfg, c);
  read_sliding_window(cfg, *arch, c);
  if (auto it = cfg.find("bos_token_id"); it != cfg.end() && it->is_number())
    c.bos_token_id = it->get<int>();
  read_eos(cfg, c);
  if (gen.is_object()) read_eos(gen, c);
  VLLM_CHECK(c.num_heads % c.num_kv_heads == 0, "num_attention_heads ", c.num_heads,
             " not a multiple of num_key_value_heads ", c.num_kv_heads);
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
  c.num_kv_heads = static_cast<int>(g.get_int(a + ".attention.head_count_kv").value_or(c.num_heads));
  c.head_dim = static_cast<int>(g.get_int(a + ".attention.key_length").value_or(c.hidden_size / c.num_heads));
  c.rms_norm_eps = g.get_float(a + ".attention.layer_norm_rms_epsilon").value_or(1e-5);
  c.rope_theta = g.get_float(a + ".rope.freq_base").value_or(10000.0);
  const int64_t rot = g.get_int(a + ".rope.dimension_count").value_or(c.head_dim);
  c.partial_rotary_factor = double(rot) / c.head_dim;
  c.max_position_embeddings = static_cast<int>(g.get_int(a + ".context_length").value_or(4096));
  if (auto t = g.get_string(a + ".rope.scaling.type"); t && *t != "none") {
    c.rope_scaling.type = *t;
    c.rope_scaling.factor = g.get_float(a + ".rope.scaling.factor").value_or(1.0);
    c.rope_scaling.original_max_position_embeddings = static_cast<int>(
        g.get_int(a + ".rope.scaling.original_context_length").value_or(0));
  }
  // llama.cpp's converter permutes q/k rows so that rotated pairs are adjacent.
  c.rope_neox = arch->gguf_name != "llama";
  c.rope_ggml_theta = true;
  c.kv_cache_f16 = true;
  if (c.rope_scaling.type != "default" && c.rope_scaling.type != "linear")
    throw Error(g.path() + ": GGUF rope scaling '" + c.rope_scaling.type + "' is not supported");
  c.attention_bias = arch->attention_bias;
  c.qk_norm = arch->qk_norm;
  c.sliding_window.assign(c.num_layers, 0);
  c.tie_word_embeddings = g.find("output.weight") == nullptr;
  const auto* embd = g.find("token_embd.weight");
  if (!embd) throw Error(g.path() + ": no token_embd.weight tensor");
  c.vocab_size = static_cast<int>(embd->shape[0]);
  if (auto v = g.get_int("tokenizer.ggml.bos_token_id")) c.bos_token_id = static_cast<int>(*v);
  if (auto v = g.get_int("tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(static_cast<int>(*v));
  if (auto v = g.get_int("tokenizer.ggml.eot_token_id"); v && (c.eos_token_ids.empty() || *v != c.eos_token_ids[0]))
    c.eos_token_ids.push_back(static_cast<int>(*v));
  return c;
}

}  // namespace vllm
