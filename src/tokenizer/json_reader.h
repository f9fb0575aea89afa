// Streaming read of tokenizer.json: the large model.vocab / model.merges sections go straight into
// vectors (a DOM of a 30 MB file costs seconds); everything else becomes an nlohmann::json.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace vllm::tok {

struct TokenizerJson {
  nlohmann::json doc;  // the whole file except model.vocab and model.merges
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
};

// Throws vllm::Error naming the file when it cannot be read or parsed.
TokenizerJson read_tokenizer_json(const std::string& path);

}  // namespace vllm::tok
