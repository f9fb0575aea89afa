// Opening a model the way a user names it: a .gguf file or a Hugging Face directory.
// Returns the decoder, its config and its tokenizer, ready for a runner.
#pragma once
#include <memory>
#include <string>

#include "model/decoder.h"
#include "tokenizer/tokenizer.h"

namespace vllm {

struct LoadedModel {
  std::string path;
  std::unique_ptr<DecoderModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  const ModelConfig& config() const { return model->config(); }
};

LoadedModel load_model(const std::string& path);
// The embedded default (SmolLM2-135M-Instruct Q4_1) as placed by scripts/setup.sh.
std::string default_model_path();

}  // namespace vllm
