#include "model/forward_batch.h"

namespace vllm {

ForwardBatch single_sequence_batch(std::span<const int32_t> new_tokens, int start,
                                   std::span<const int32_t> block_table, int block_size,
                                   std::vector<int32_t> logits_rows) {
  ForwardBatch b;
  const int n = static_cast<int>(new_tokens.size());
  b.token_ids.assign(new_tokens.begin(), new_tokens.end());
  for (int i = 0; i < n; ++i) {
    const int pos = start + i;
    b.positions.push_back(pos);
    b.slot_mapping.push_back(block_table[pos / block_size] * block_size + pos % block_size);
  }
  b.logits_indices = std::move(logits_rows);
  b.attn.query_start_loc = {0, n};
  b.attn.seq_lens = {start + n};
  b.attn.block_tables.assign(block_table.begin(), block_table.end());
  b.attn.max_blocks_per_seq = static_cast<int>(block_table.size());
  return b;
}

}  // namespace vllm
