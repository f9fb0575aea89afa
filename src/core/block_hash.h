// Prefix-cache block hashes: a 128-bit chained hash hash(parent, block token ids, extra keys)
// over full blocks only. Equal hashes are taken to mean equal prefixes (see block_hash.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace vllm::core {

// 128 bits so that an accidental collision (two different prefixes sharing KV) is not a
// practical concern: with 2^40 cached blocks the birthday bound is ~2^-48. Not a
// cryptographic hash: a client able to choose prompts could in principle craft collisions.
struct BlockHash {
  uint64_t hi = 0;
  uint64_t lo = 0;
  friend bool operator==(const BlockHash&, const BlockHash&) = default;
};

// Hash of one full block. `parent` is the previous block's hash (nullopt for the first
// block); `extra_keys` carry anything besides token ids that changes the KV (cache salt,
// adapter id, multimodal content hashes).
BlockHash hash_block_tokens(const std::optional<BlockHash>& parent,
                            std::span<const int> token_ids,
                            std::span<const uint64_t> extra_keys = {});

// 64-bit digest of a string, for turning a cache salt into an extra key.
uint64_t hash_string(std::span<const char> bytes);

// Block hashes of every full block of `token_ids`, chained; `first_block_extra_keys` apply to
// block 0 only (vLLM applies the cache salt that way).
std::vector<BlockHash> hash_token_blocks(std::span<const int> token_ids, int block_size,
                                         std::span<const uint64_t> first_block_extra_keys = {});

}  // namespace vllm::core

template <>
struct std::hash<vllm::core::BlockHash> {
  size_t operator()(const vllm::core::BlockHash& h) const noexcept {
    return static_cast<size_t>(h.lo ^ (h.hi * 0x9e3779b97f4a7c15ULL));
  }
};
