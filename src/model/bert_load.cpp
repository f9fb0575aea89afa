// BertModel::load: config.json, the sentence-transformers modules (pooling, normalisation,
// max_seq_length) and the safetensors weights, every shape checked against the config.
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "loader/json_file.h"
#include "loader/safetensors.h"
#include "model/bert.h"
#include "model/bert_layer.h"
#include "util/check.h"

namespace vllm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int positive_int(const json& cfg, const char* key, const std::string& file) {
  if (!cfg.contains(key) || !cfg[key].is_number_integer() || cfg[key].get<int64_t>() <= 0 ||
      cfg[key].get<int64_t>() > (int64_t{1} << 24))
    throw Error(file + ": '" + key + "' must be a positive integer");
  return cfg[key].get<int>();
}

BertConfig parse_config(const json& cfg, const std::string& file) {
  BertConfig c;
  c.vocab_size = positive_int(cfg, "vocab_size", file);
  c.hidden_size = positive_int(cfg, "hidden_size", file);
  c.num_layers = positive_int(cfg, "num_hidden_layers", file);
  c.num_heads = positive_int(cfg, "num_attention_heads", file);
  c.intermediate_size = positive_int(cfg, "intermediate_size", file);
  c.max_position_embeddings = positive_int(cfg, "max_position_embeddings", file);
  c.type_vocab_size = positive_int(cfg, "type_vocab_size", file);
  c.layer_norm_eps = cfg.value("layer_norm_eps", 1e-12f);
  if (c.hidden_size % c.num_heads != 0)
    throw Error(file + ": hidden_size is not a multiple of num_attention_heads");
  const std::string act = cfg.value("hidden_act", std::string("gelu"));
  if (act != "gelu")
    throw Error(file + ": hidden_act '" + act +
                "' is not supported (only gelu, the exact erf form)");
  const std::string pos = cfg.value("position_embedding_type", std::string("absolute"));
  if (pos != "absolute")
    throw Error(file + ": position_embedding_type '" + pos + "' is not supported (only absolute)");
  return c;
}

// sentence-transformers' modules.json: the Pooling module's config and whether a Normalize
// module follows. Without modules.json, vLLM's default for BERT: CLS token, normalised.
PoolingConfig parse_pooling(const fs::path& dir) {
  PoolingConfig p;
  if (fs::exists(dir / "sentence_bert_config.json")) {
    const json sb = read_json_file(dir / "sentence_bert_config.json");
    if (sb.contains("max_seq_length") && sb["max_seq_length"].is_number_integer())
      p.max_seq_length = sb["max_seq_length"].get<int>();
  }
  if (!fs::exists(dir / "modules.json")) return p;
  const json modules = read_json_file(dir / "modules.json");
  const std::string file = (dir / "modules.json").string();
  if (!modules.is_array()) throw Error(file + ": expected a list of modules");
  p.normalize = false;
  bool pooled = false;
  for (const json& m : modules) {
    const std::string type = m.value("type", std::string());
    if (type == "sentence_transformers.models.Normalize") {
      p.normalize = true;
    } else if (type == "sentence_transformers.models.Pooling") {
      const fs::path cfg_path = dir / m.value("path", std::string()) / "config.json";
      const json pc = read_json_file(cfg_path);
      const bool mean = pc.value("pooling_mode_mean_tokens", false);
      const bool cls = pc.value("pooling_mode_cls_token", false);
      for (const char* other : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                                "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"})
        if (pc.value(other, false))
          throw Error(cfg_path.string() + ": " + other + " is not supported (mean or cls only)");
      if (mean == cls)
        throw Error(cfg_path.string() + ": exactly one of mean and cls pooling is supported");
      p.mode = mean ? PoolingConfig::Mode::kMean : PoolingConfig::Mode::kCls;
      pooled = true;
    } else if (type != "sentence_transformers.models.Transformer") {
      throw Error(file + ": module type '" + type + "' is not supported");
    }
  }
  if (!pooled) throw Error(file + ": no sentence_transformers.models.Pooling module");
  return p;
}

class Weights {
 public:
  Weights(std::shared_ptr<SafetensorsModel> st, std::string prefix)
      : st_(std::move(st)), prefix_(std::move(prefix)) {}

  Tensor get(const std::string& name, std::initializer_list<int64_t> shape) const {
    const std::string full = prefix_ + name;
    if (!st_->has(full)) throw Error("BERT checkpoint: missing tensor " + full);
    Tensor t = st_->tensor(full);
    if (t.shape() != std::vector<int64_t>(shape))
      throw Error("BERT checkpoint: " + full + " has shape " + t.shape_str() +
                  ", the config implies another");
    return t;
  }
  std::vector<float> floats(const std::string& name, std::initializer_list<int64_t> shape) const {
    const Tensor t = get(name, shape);
    std::vector<float> out(static_cast<size_t>(t.numel()));
    const auto* raw = static_cast<const uint16_t*>(t.raw());
    for (size_t i = 0; i < out.size(); ++i) {
      switch (t.dtype()) {
        case DType::F32: out[i] = t.data<float>()[i]; break;
        case DType::F16: out[i] = f16_to_f32(raw[i]); break;
        case DType::BF16: out[i] = bf16_to_f32(raw[i]); break;
        default: throw Error("BERT checkpoint: " + prefix_ + name + " is not a float tensor");
      }
    }
    return out;
  }
  // Row-wise concatenation of same-typed matrices (q, k, v into one [3H, H] weight).
  Tensor concat_rows(const std::vector<Tensor>& parts) const {
    int64_t rows = 0;
    for (const Tensor& p : parts) rows += p.size(0);
    Tensor out = Tensor::empty({rows, parts[0].size(1)}, parts[0].dtype());
    char* dst = static_cast<char*>(out.raw());
    for (const Tensor& p : parts) {
      if (p.dtype() != parts[0].dtype())
        throw Error("BERT checkpoint: q/k/v weights differ in type");
      std::memcpy(dst, p.raw(), static_cast<size_t>(p.nbytes()));
      dst += p.nbytes();
    }
    return out;
  }
  const std::shared_ptr<SafetensorsModel>& file() const { return st_; }

 private:
  std::shared_ptr<SafetensorsModel> st_;
  std::string prefix_;
};

BertModel::Layer load_layer(const Weights& w, const BertConfig& c, int i) {
  const std::string p = "encoder.layer." + std::to_string(i) + ".";
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  BertModel::Layer l;
  const Tensor qkv = w.concat_rows({w.get(p + "attention.self.query.weight", {H, H}),
                                    w.get(p + "attention.self.key.weight", {H, H}),
                                    w.get(p + "attention.self.value.weight", {H, H})});
  std::vector<float> bias = w.floats(p + "attention.self.query.bias", {H});
  for (const char* name : {"attention.self.key.bias", "attention.self.value.bias"}) {
    const std::vector<float> b = w.floats(p + name, {H});
    bias.insert(bias.end(), b.begin(), b.end());
  }
  l.qkv = bert_gemm::pack(qkv, bias);
  l.attn_out = bert_gemm::pack(w.get(p + "attention.output.dense.weight", {H, H}),
                               w.floats(p + "attention.output.dense.bias", {H}));
  l.attn_ln_weight = w.floats(p + "attention.output.LayerNorm.weight", {H});
  l.attn_ln_bias = w.floats(p + "attention.output.LayerNorm.bias", {H});
  l.up = bert_gemm::pack(w.get(p + "intermediate.dense.weight", {I, H}),
                         w.floats(p + "intermediate.dense.bias", {I}));
  l.down = bert_gemm::pack(w.get(p + "output.dense.weight", {H, I}),
                           w.floats(p + "output.dense.bias", {H}));
  l.out_ln_weight = w.floats(p + "output.LayerNorm.weight", {H});
  l.out_ln_bias = w.floats(p + "output.LayerNorm.bias", {H});
  return l;
}

}  // namespace

bool is_bert_model(const std::string& dir) {
  const fs::path cfg = fs::path(dir) / "config.json";
  if (!fs::is_directory(dir) || !fs::exists(cfg)) return false;
  const json j = read_json_file(cfg);
  if (!j.contains("architectures") || !j["architectures"].is_array()) return false;
  for (const json& a : j["architectures"])
    if (a.is_string() && a.get<std::string>() == "BertModel") return true;
  return false;
}

std::unique_ptr<BertModel> BertModel::load(const std::string& dir, Device device) {
  if (device.kind != DeviceKind::Cpu)
    throw Error("embedding models run on CPU only for now (got --device " + device.str() + ")");
  const fs::path root(dir);
  const std::string cfg_file = (root / "config.json").string();
  std::unique_ptr<BertModel> m(new BertModel());
  m->config_ = parse_config(read_json_file(cfg_file), cfg_file);
  m->pooling_ = parse_pooling(root);
  const BertConfig& c = m->config_;
  auto st = SafetensorsModel::open(dir);
  // sentence-transformers checkpoints name tensors from the encoder; BertFor* ones under "bert.".
  const std::string prefix = st->has("embeddings.word_embeddings.weight") ? "" : "bert.";
  const Weights w(st, prefix);
  const int64_t H = c.hidden_size;
  m->word_embeddings_ = w.get("embeddings.word_embeddings.weight", {c.vocab_size, H});
  m->position_embeddings_ = w.floats("embeddings.position_embeddings.weight",
                                     {c.max_position_embeddings, H});
  std::vector<float> types = w.floats("embeddings.token_type_embeddings.weight",
                                      {c.type_vocab_size, H});
  m->token_type0_.assign(types.begin(), types.begin() + H);
  m->embed_ln_weight_ = w.floats("embeddings.LayerNorm.weight", {H});
  m->embed_ln_bias_ = w.floats("embeddings.LayerNorm.bias", {H});
  for (int i = 0; i < c.num_layers; ++i) m->layers_.push_back(load_layer(w, c, i));
  m->weights_ = st;
  return m;
}

int BertModel::max_model_len() const {
  const int st = pooling_.max_seq_length;
  return st > 0 && st < config_.max_position_embeddings ? st : config_.max_position_embeddings;
}

}  // namespace vllm
