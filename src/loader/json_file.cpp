#include "loader/json_file.h"

#include <fstream>

#include "util/check.h"

namespace vllm {

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw Error(path.string() + ": cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path.string() + ": invalid JSON: " + e.what());
  }
}

}  // namespace vllm
