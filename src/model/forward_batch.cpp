#include "model/forward_batch.h"

#include <numeric>

namespace vllm {

ForwardBatch single_sequence_batch(std::span<const int32_t> new_tokens, int start,
                                   const std::vector<std::vector<int32_t>>& block_tables,
                                   int block_size, std::vector<int32_t> logits_rows) {
  ForwardBatch b;
  const int n = static_cast<int>(new_tokens.size());
  b.token_ids.assign(new_tokens.begin(), new_tokens.end());
  for (int i = 0; i < n; ++i) b.positions.push_back(start + i);
  b.logits_indices = std::move(logits_rows);
  for (const std::vector<int32_t>& table : block_tables) {
    std::vector<int32_t>& slots = b.slot_mappings.emplace_back();
    for (int pos = start; pos < start + n; ++pos)
      slots.push_back(table[pos / block_size] * block_size + pos % block_size);
    AttentionMeta& a = b.attn.emplace_back();
    a.query_start_loc = {0, n};
    a.seq_lens = {start + n};
    a.block_tables = table;
    a.max_blocks_per_seq = static_cast<int>(table.size());
  }
  return b;
}

std::vector<std::vector<int32_t>> single_sequence_tables(int num_groups, int blocks_per_group) {
  std::vector<std::vector<int32_t>> tables(num_groups, std::vector<int32_t>(blocks_per_group));
  for (int g = 0; g < num_groups; ++g)
    std::iota(tables[g].rbegin(), tables[g].rend(), g * blocks_per_group);
  return tables;
}

}  // namespace vllm
