// WordPiece (tokenizers' WordPiece model and decoder, as BERT uses them): greedy longest match
// from the start of a word, later pieces spelled with the continuing prefix ("##"); a word with
// a part that matches nothing, or longer than max_input_chars_per_word, is one unk token.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/token_model.h"

namespace vllm::tok {

struct WordPieceOptions {
  std::string unk_token = "[UNK]";
  std::string continuing_subword_prefix = "##";
  size_t max_input_chars_per_word = 100;
};

class WordPieceModel final : public TokenModel {
 public:
  // vocab: (token, id) pairs. Throws vllm::Error when the unk token is not in it.
  WordPieceModel(const std::vector<std::pair<std::string, int32_t>>& vocab,
                 WordPieceOptions options);

  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;
  int32_t id_limit() const override { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  TokenMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  WordPieceOptions options_;
  int32_t unk_id_ = 0;
};

// tokenizers' WordPiece decoder: pieces after the first get a space unless they start with
// `prefix` (which is dropped); `cleanup` undoes the spaces BERT puts before punctuation and
// contractions (" ." -> ".", " n't" -> "n't", ...).
std::unique_ptr<Decoder> make_wordpiece_decoder(std::string prefix, bool cleanup);

}  // namespace vllm::tok
