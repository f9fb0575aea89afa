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
  std::vector<int32_t> logits_indices;  // rows of T whose logits are wanted
  // Per KV cache group (layers sharing a block table, see KvCacheGroup): the cache slot of each
  // token's K/V [T], and the attention metadata with that group's block tables.
  // query_start_loc and seq_lens are the same in every group.
  std::vector<std::vector<int32_t>> slot_mappings;
  std::vector<AttentionMeta> attn;
  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_groups() const { return static_cast<int>(attn.size()); }
};

// One sequence: the new tokens sit at positions [start, start + new_tokens.size()) of a
// context whose KV lives in block_tables[g] in KV cache group g; logits are wanted for
// logits_rows (indices into the new tokens).
ForwardBatch single_sequence_batch(std::span<const int32_t> new_tokens, int start,
                                   const std::vector<std::vector<int32_t>>& block_tables,
                                   int block_size, std::vector<int32_t> logits_rows);

// Block tables for one sequence that owns a cache of num_groups * blocks_per_group blocks:
// group g gets its own blocks, in reverse order so that the tables are not trivial.
std::vector<std::vector<int32_t>> single_sequence_tables(int num_groups, int blocks_per_group);

// A KV cache group (vLLM's): layers with the same cache spec that share one block table.
// Layer j of every group shares one buffer (vLLM's hybrid layout), so a block id means the
// same bytes in every group and the pool is one; groups of a kind have equal sizes, the last
// may be smaller.
struct KvCacheGroup {
  int sliding_window = 0;  // 0 = full attention
  std::vector<int> layers;
};

// Per-layer paged K/V storage: [num_blocks, block_size, num_kv_heads, head_dim] each, f32 or
// f16; layers at the same place in their groups share their tensors.
struct KvCache {
  std::vector<Tensor> k, v;
  int num_blocks = 0;
  int block_size = 0;
  // Decode graphs captured over this cache, by (padded batch size, block-table width): they
  // write into these tensors, so they live and die with them (see decoder_graphs.cpp).
  std::map<std::pair<int, int>, std::shared_ptr<void>> graphs;
};

}  // namespace vllm
