// The model step of a tokenizer pipeline (BPE or WordPiece): one pre-tokenized word to ids, and
// the vocabulary both ways. Implementations are immutable after construction (thread-safe).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vllm::tok {

class TokenModel {
 public:
  virtual ~TokenModel() = default;
  // Appends the ids of one pre-tokenized word.
  virtual void tokenize(std::string_view word, std::vector<int32_t>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual const std::string* id_to_token(int32_t id) const = 0;  // nullptr: not in the vocab
  virtual int32_t id_limit() const = 0;                           // highest id + 1
};

}  // namespace vllm::tok
