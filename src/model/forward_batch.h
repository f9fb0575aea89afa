// ForwardBatch: what one model step computes, built by the runner from the scheduler's
// decisions. Tokens of all sequences are flattened; attention metadata says who is who.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "runtime/ops.h"

namespace vllm {

struct ForwardBatch {
  std::vector<int32_t> token_ids;       // [T]
  std::vector<int32_t> positions;       // [T]
  std::vector<int32_t> slot_mapping;    // [T] cache slot of each token's K/V
  std::vector<int32_t> logits_indices;  // rows of T whose logits are wanted
  AttentionMeta attn;
  int num_tokens() const { return static_cast<int>(token_ids.size()); }
};

// One sequence: the new tokens sit at positions [start, start + new_tokens.size()) of a
// context whose KV lives in block_table; logits are wanted for logits_rows (indices into the
// new tokens).
ForwardBatch single_sequence_batch(std::span<const int32_t> new_tokens, int start,
                                   std::span<const int32_t> block_table, int block_size,
                                   std::vector<int32_t> logits_rows);

// Per-layer paged K/V storage: [num_blocks, block_size, num_kv_heads, head_dim] each, f32 or
// f16.
struct KvCache {
  std::vector<Tensor> k, v;
  int num_blocks = 0;
  int block_size = 0;
  // Decode graphs captured over this cache, by (padded batch size, block-table width): they
  // write into these tensors, so they live and die with them (see decoder_graphs.cpp).
  std::map<std::pair<int, int>, std::shared_ptr<void>> graphs;
};

}  // namespace vllm
