// Added tokens (tokenizers' AddedVocabulary): found in the text before the model runs, by
// leftmost-longest match; honours single_word, lstrip, rstrip and normalized.
#pragma once
#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe.h"

namespace vllm::tok {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

struct Span {
  size_t start, end;
  int32_t id;  // -1: plain text
};

class AddedVocab {
 public:
  void add(AddedToken token);  // a later token with the same content replaces the earlier one
  // Builds the matchers; normalized tokens are matched by their normalized content.
  void build(const Normalizer* normalizer);

  // Cuts text into plain stretches and added-token matches (non-normalized tokens when
  // normalized == false, normalized tokens otherwise). Empty text gives no spans.
  std::vector<Span> split(std::string_view text, bool normalized) const;

  const AddedToken* by_id(int32_t id) const;
  std::optional<int32_t> id_of(std::string_view content) const;
  bool is_special_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  struct Trie {
    std::unordered_map<uint64_t, int32_t> edges;  // (node << 8 | byte) -> child node
    std::vector<int32_t> terminal{-1};            // node -> index into tokens_, -1 if none
    std::bitset<256> first_bytes;
    void insert(std::string_view key, int32_t token_index);
    bool empty() const { return terminal.size() == 1; }
  };

  std::vector<AddedToken> tokens_;
  TokenMap by_content_;                        // content -> index into tokens_
  std::unordered_map<int32_t, size_t> by_id_;  // id -> index into tokens_
  Trie raw_trie_, normalized_trie_;
};

}  // namespace vllm::tok
