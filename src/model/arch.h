// Architecture declarations: each supported family is a row of options on the shared decoder
// (src/model/decoder.*), plus how its config is read. No architecture has its own forward.
#pragma once
#include <nlohmann/json.hpp>
#include <string_view>

#include "model/config.h"

namespace vllm {

class GgufFile;

struct ArchSpec {
  std::string_view hf_name;    // config.json "architectures"[0]
  std::string_view gguf_name;  // general.architecture, or empty
  bool attention_bias;         // q/k/v projections carry biases (overridable by config)
  bool qk_norm;                // per-head q/k RMSNorm
  bool sliding_window;         // the config's sliding_window applies to layers
};

const ArchSpec* find_arch(std::string_view hf_name);
const ArchSpec& arch_of(const ModelConfig& config);

// config.json (+ generation_config.json for eos ids, may be null) -> ModelConfig.
ModelConfig config_from_hf(const nlohmann::json& config, const nlohmann::json& generation_config);
// GGUF metadata ({arch}.* keys) -> ModelConfig.
ModelConfig config_from_gguf(const GgufFile& gguf);

}  // namespace vllm
