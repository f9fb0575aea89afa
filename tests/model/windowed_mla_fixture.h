// A DeepSeek-V2 tiny checkpoint (fixtures/tiny/deepseek_v2, MLA with a latent row of 32 + 8
// lanes) re-declared with MLA sliding-window layers and padded cache rows: its config.json is
// rewritten into a temporary directory beside a link to the same weights. No upstream code
// runs such a model, so tests check it by relations (docs/model_configs.md has the fields).
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace vllm::testing_mla {

constexpr int kLatentWidth = 40;  // kv_lora_rank 32 + qk_rope_head_dim 8

// layer_types: one of "full_attention" / "sliding_attention" per layer (3 layers); empty keeps
// the checkpoint's (all full). window and padded_dim <= 0 leave those fields out.
inline std::string windowed_mla_model(const std::string& name,
                                      const std::vector<std::string>& layer_types, int window,
                                      int padded_dim) {
  namespace fs = std::filesystem;
  const fs::path src = fs::absolute("fixtures/tiny/deepseek_v2");
  const fs::path dir =
      fs::temp_directory_path() / ("vllm_mla_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(src / "config.json"));
  if (!layer_types.empty()) cfg["layer_types"] = layer_types;
  if (window != 0) cfg["sliding_window"] = window;
  if (padded_dim > 0) cfg["kv_cache_padded_dim"] = padded_dim;
  std::ofstream(dir / "config.json") << cfg.dump(1);
  fs::create_symlink(src / "model.safetensors", dir / "model.safetensors");
  return dir.string();
}

}  // namespace vllm::testing_mla
