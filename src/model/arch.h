// Architecture declarations: each supported family is a parse function that fills the per-layer
// ModelConfig (model/config.h) from config.json or GGUF metadata. The shared decoder
// (model/decoder.*) runs every family from that description; no family has its own forward.
#pragma once
#include <nlohmann/json.hpp>
#include <string_view>

#include "model/config.h"

namespace vllm {

class GgufFile;

struct ArchSpec {
  std::string_view hf_name;    // config.json "architectures"[0]
  std::string_view gguf_name;  // general.architecture, or empty
  // Family-specific fields, after the common ones (sizes, eps, RoPE, windows, eos) are read.
  void (*from_hf)(const nlohmann::json& config, ModelConfig& c);
  void (*from_gguf)(const GgufFile& gguf, const std::string& prefix, ModelConfig& c);
};

const ArchSpec* find_arch(std::string_view hf_name);

// config.json (+ generation_config.json for eos ids, may be null) -> ModelConfig. Throws
// vllm::Error naming the field when a config asks for something the decoder does not do.
ModelConfig config_from_hf(const nlohmann::json& config, const nlohmann::json& generation_config);
// GGUF metadata ({arch}.* keys) -> ModelConfig.
ModelConfig config_from_gguf(const GgufFile& gguf);

}  // namespace vllm
