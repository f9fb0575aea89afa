// Normalizers of tokenizer.json (NFC, Replace, Prepend, Strip, BertNormalizer, Sequence): text ->
// text, applied to each stretch of input between added tokens, before pre-tokenization.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace vllm::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// Builds from a tokenizer.json "normalizer" value; nullptr for null. Throws vllm::Error for
// unsupported types.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j);

std::unique_ptr<Normalizer> make_nfc_normalizer();
std::unique_ptr<Normalizer> make_prepend_normalizer(std::string prefix);
std::unique_ptr<Normalizer> make_replace_normalizer(std::string pattern, std::string content);
std::unique_ptr<Normalizer> make_sequence_normalizer(
    std::vector<std::unique_ptr<Normalizer>> parts);

// Replaces every non-overlapping occurrence of `from` (non-empty) with `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace vllm::tok
