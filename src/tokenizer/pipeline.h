// Internal: the assembled tokenizer (normalizer -> added tokens -> pre-tokenizer -> BPE or
// WordPiece -> post-processor; decoder for the way back) shared by the loaders, Tokenizer and the
// detokenizer.
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/token_model.h"

namespace vllm::tok {

struct Pipeline {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<TokenModel> model;
  AddedVocab added;
  // add_special_tokens: ids placed around the sequence (TemplateProcessing "single").
  std::vector<int32_t> prefix_ids, suffix_ids;
  std::unique_ptr<Decoder> decoder;

  std::string bos_token, eos_token;
  std::optional<std::string> chat_template;

  // Derived by finalize(): per-id token strings and flags over model + added tokens. Flags:
  // bit 0 known id, bit 1 special (skipped by decode), bit 2 a <0xAB> byte token.
  std::vector<std::string> id_to_token;
  std::vector<uint8_t> id_flags;
  void finalize();

  void encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;
  bool known(int32_t id) const {
    return id >= 0 && id < static_cast<int32_t>(id_flags.size()) && (id_flags[id] & 1);
  }
  bool special(int32_t id) const { return known(id) && (id_flags[id] & 2); }
  bool byte_token(int32_t id) const { return known(id) && (id_flags[id] & 4); }
};

}  // namespace vllm::tok
