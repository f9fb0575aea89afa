// The architecture declarations: per-layer specs read from config.json, the errors a bad
// config gets at load, and LongRoPE's long tables against transformers' own.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/arch.h"
#include "model/load.h"
#include "util/check.h"

using namespace vllm;
using nlohmann::json;

namespace {

json fixture_config(const std::string& name) {
  return json::parse(std::ifstream("fixtures/tiny/" + name + "/config.json"));
}

// The message of the vllm::Error that config_from_hf throws for `cfg`, or "" if none.
std::string load_error(const json& cfg) {
  try {
    config_from_hf(cfg, json());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Arch, Gemma3LayersFromLayerTypesAndPerTypeRope) {
  const ModelConfig c = config_from_hf(fixture_config("gemma3"), json());
  ASSERT_EQ(c.layers.size(), 3u);
  EXPECT_EQ(c.layers[0].sliding_window, 8);
  EXPECT_EQ(c.layers[1].sliding_window, 0);
  EXPECT_EQ(c.layers[0].rope.theta, 10000.0);
  EXPECT_EQ(c.layers[0].rope.scaling.type, "default");
  EXPECT_EQ(c.layers[1].rope.theta, 1000000.0);
  EXPECT_EQ(c.layers[1].rope.scaling.type, "linear");
  for (const LayerSpec& L : c.layers) {
    EXPECT_EQ(L.norm, NormPlacement::kSandwich);
    EXPECT_EQ(L.qk_norm, QkNorm::kPerHead);
    EXPECT_EQ(L.activation, Activation::kGeluTanh);
  }
  EXPECT_FLOAT_EQ(c.softmax_scale(), static_cast<float>(1.0 / std::sqrt(24.0)));
  EXPECT_DOUBLE_EQ(c.embedding_multiplier, 8.0);  // sqrt(hidden_size 64)
  EXPECT_EQ(c.norm_weight_offset, 1.0);
}

// Before transformers 5: sliding_window_pattern, rope_theta and rope_local_base_freq.
TEST(Arch, Gemma3PublishedConfigSpelling) {
  json cfg = fixture_config("gemma3");
  cfg.erase("layer_types");
  cfg.erase("rope_parameters");
  cfg["num_hidden_layers"] = 12;
  cfg["sliding_window_pattern"] = 6;
  cfg["rope_theta"] = 1000000.0;
  cfg["rope_local_base_freq"] = 10000.0;
  cfg["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  const ModelConfig c = config_from_hf(cfg, json());
  for (int i = 0; i < 12; ++i) {
    const bool global = (i + 1) % 6 == 0;
    EXPECT_EQ(c.layers[i].sliding_window, global ? 0 : 8) << i;
    EXPECT_EQ(c.layers[i].rope.theta, global ? 1000000.0 : 10000.0) << i;
    EXPECT_EQ(c.layers[i].rope.scaling.type, global ? "linear" : "default") << i;
  }
}

TEST(Arch, Qwen2WindowsFromMaxWindowLayers) {
  json cfg = fixture_config("qwen2_swa");
  cfg.erase("layer_types");  // the pre-transformers-5 spelling alone
  const ModelConfig c = config_from_hf(cfg, json());
  EXPECT_EQ(c.layers[0].sliding_window, 0);
  EXPECT_EQ(c.layers[1].sliding_window, 8);
  EXPECT_EQ(c.layers[2].sliding_window, 8);
  const ModelConfig v5 = config_from_hf(fixture_config("qwen2_swa"), json());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(v5.layers[i].sliding_window, c.layers[i].sliding_window);
}

TEST(Arch, BadConfigsNameTheField) {
  json cfg = fixture_config("gemma3");
  cfg["sliding_window"] = 0;
  EXPECT_NE(load_error(cfg).find("sliding_window"), std::string::npos) << load_error(cfg);

  cfg = fixture_config("gemma3");
  cfg["layer_types"][1] = "chunked_attention";
  EXPECT_NE(load_error(cfg).find("unknown layer type 'chunked_attention'"), std::string::npos)
      << load_error(cfg);

  cfg = fixture_config("llama");
  cfg["rope_parameters"]["rope_type"] = "dynamic";
  EXPECT_NE(load_error(cfg).find("rope type 'dynamic'"), std::string::npos) << load_error(cfg);
  cfg.erase("rope_parameters");  // the published spelling
  cfg["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  EXPECT_NE(load_error(cfg).find("rope_scaling rope type 'dynamic'"), std::string::npos)
      << load_error(cfg);

  cfg = fixture_config("gemma3");
  cfg["final_logit_softcapping"] = 30.0;
  EXPECT_NE(load_error(cfg).find("final_logit_softcapping"), std::string::npos);

  cfg = fixture_config("llama");
  cfg["mlp_bias"] = true;
  EXPECT_NE(load_error(cfg).find("mlp_bias"), std::string::npos);

  cfg = fixture_config("llama");
  cfg["hidden_act"] = "relu2";
  EXPECT_NE(load_error(cfg).find("hidden_act 'relu2'"), std::string::npos);

  cfg = fixture_config("phi3");
  cfg["rope_parameters"]["short_factor"] = {1.0, 2.0};
  EXPECT_NE(load_error(cfg).find("short_factor"), std::string::npos) << load_error(cfg);
}

// A declared layer whose weights are missing: the error names the tensor.
TEST(Arch, MissingTensorOfADeclaredLayerIsNamed) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "vllm_arch_missing_norm";
  fs::create_directories(dir);
  json cfg = fixture_config("olmo2");
  cfg["architectures"] = {"Gemma3ForCausalLM"};  // wants sandwich norms OLMo-2 lacks
  cfg["sliding_window"] = 8;
  cfg["head_dim"] = 16;
  std::ofstream(dir / "config.json") << cfg.dump();
  fs::copy_file("fixtures/tiny/olmo2/model.safetensors", dir / "model.safetensors",
                fs::copy_options::overwrite_existing);
  try {
    load_model(dir.string());
    FAIL() << "loaded a Gemma-3 config over OLMo-2 weights";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor model.layers.0.input_layernorm.weight"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

// Past the original context LongRoPE switches to its long factors: transformers' own tables
// (fixtures/tiny/phi3/reference.json, longrope_long) against ours.
TEST(Arch, LongRopeLongFactorsMatchTransformers) {
  const ModelConfig c = config_from_hf(fixture_config("phi3"), json());
  const json ref = json::parse(std::ifstream("fixtures/tiny/phi3/reference.json"))["longrope_long"];
  const RopeTables t = compute_rope_tables(c.layers[0].rope, c.head_dim,
                                           c.max_position_embeddings, /*max_model_len=*/4096);
  const auto want = ref["inv_freq"].get<std::vector<float>>();
  ASSERT_EQ(t.inv_freq.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(t.inv_freq[i], want[i]) << i;
  EXPECT_FLOAT_EQ(t.mscale, ref["attention_factor"].get<float>());
  // Within the original context the short factors apply: the logits fixture checks those.
}
