// TokenVocab: the bytes of every token of a tokenizer and a byte trie over them, shared by all
// grammars compiled for that tokenizer (which must outlive it: it encodes with it). Special tokens have no bytes and never match a grammar;
// the end-of-sequence ids are allowed exactly where a grammar accepts.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace vllm {
class Tokenizer;
}

namespace vllm::structured {

class TokenVocab {
 public:
  // bytes[id]: the token's bytes, or nullopt for tokens a grammar never produces (special,
  // unknown). vocab_size may exceed bytes.size() (padded model vocabularies).
  // encode: the tokenizer's own encoding of text (no special tokens), for the forced-bytes
  // rule of GrammarMatcher::fill_mask; may be empty (then no such rule).
  using Encoder = std::function<std::vector<int32_t>(std::string_view)>;
  TokenVocab(std::vector<std::optional<std::string>> bytes, std::vector<int32_t> eos_ids,
             int32_t vocab_size, Encoder encode = {});
  static std::shared_ptr<const TokenVocab> from_tokenizer(const Tokenizer& tok,
                                                          std::vector<int32_t> eos_ids,
                                                          int32_t vocab_size);

  int32_t vocab_size() const { return vocab_size_; }
  int mask_words() const { return (vocab_size_ + 31) / 32; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  bool is_eos(int32_t id) const;
  int max_token_bytes() const { return max_token_bytes_; }
  const Encoder& encoder() const { return encode_; }
  // nullptr for tokens without bytes.
  const std::string* token_bytes(int32_t id) const {
    return id >= 0 && id < static_cast<int32_t>(bytes_.size()) && bytes_[id] ? &*bytes_[id]
                                                                               : nullptr;
  }

  // The trie: node 0 is the root; a node's children are consecutive ids.
  int num_nodes() const { return static_cast<int>(node_byte_.size()); }
  uint8_t node_byte(int node) const { return node_byte_[node]; }
  int first_child(int node) const { return first_child_[node]; }
  int num_children(int node) const { return num_children_[node]; }
  // Tokens whose bytes end at this node.
  std::span<const int32_t> tokens_at(int node) const {
    return {token_ids_.data() + token_begin_[node],
            static_cast<size_t>(token_begin_[node + 1] - token_begin_[node])};
  }

 private:
  int32_t vocab_size_;
  int max_token_bytes_ = 0;
  std::vector<std::optional<std::string>> bytes_;
  std::vector<int32_t> eos_ids_;
  Encoder encode_;
  std::vector<uint8_t> node_byte_;
  std::vector<int32_t> first_child_, num_children_;
  std::vector<int32_t> token_begin_, token_ids_;
};

}  // namespace vllm::structured
