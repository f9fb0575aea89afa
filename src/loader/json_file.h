// Reading a JSON file of a model directory (config.json, generation_config.json, ...) with
// errors that name the file.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>

namespace vllm {

// The parsed file; vllm::Error "PATH: cannot open" or "PATH: invalid JSON: ..." otherwise.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace vllm
