// Pre-tokenizers of tokenizer.json (Split, ByteLevel, Digits, Metaspace, BertPreTokenizer,
// Sequence): cut normalized text into words for the model. Pieces never come out empty.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace vllm::tok {

struct Piece {
  std::string text;
  bool first =
      false;  // starts at offset 0 of the original input (Metaspace prepend_scheme "first")
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Builds from a tokenizer.json "pre_tokenizer" value; nullptr for null.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j);

std::unique_ptr<PreTokenizer> make_regex_split(const std::string& regex, SplitBehavior behavior,
                                               bool invert = false);
std::unique_ptr<PreTokenizer> make_byte_level(bool add_prefix_space, bool use_regex);
std::unique_ptr<PreTokenizer> make_digits(bool individual_digits);
std::unique_ptr<PreTokenizer> make_sequence_pre_tokenizer(
    std::vector<std::unique_ptr<PreTokenizer>> parts);

// The GPT-2 pattern that ByteLevel(use_regex=true) splits with.
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace vllm::tok
