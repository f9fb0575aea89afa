#include "model/last_token_pooling.h"

#include <algorithm>

#include "util/check.h"

namespace vllm {

LastTokenPooling::LastTokenPooling(const DecoderModel& model, int max_model_len)
    : model_(model),
      max_model_len_(max_model_len > 0 ? max_model_len
                                       : model.config().max_position_embeddings) {
  if (model.device().kind != DeviceKind::Cpu)
    throw Error("last-token pooling runs on the CPU only (the model is on " +
                model.device().str() + ")");
}

namespace {

constexpr int kBlock = 16;

// All sequences in one step, each a fresh context over its own blocks (the same ids in every
// KV cache group, one group after another); the wanted rows are each sequence's last token.
// `num_blocks` receives the blocks the cache needs.
ForwardBatch pack(const std::vector<std::vector<int32_t>>& seqs, int groups, int& num_blocks) {
  ForwardBatch b;
  std::vector<int32_t> first_block;  // per sequence, within a group
  int per_group = 0, widest = 0;
  for (const auto& ids : seqs) {
    const int blocks = (static_cast<int>(ids.size()) + kBlock - 1) / kBlock;
    first_block.push_back(per_group);
    per_group += blocks;
    widest = std::max(widest, blocks);
  }
  num_blocks = per_group * groups;
  b.attn.resize(groups);
  b.slot_mappings.resize(groups);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int n = static_cast<int>(seqs[i].size());
    b.token_ids.insert(b.token_ids.end(), seqs[i].begin(), seqs[i].end());
    for (int p = 0; p < n; ++p) b.positions.push_back(p);
    b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size()) - 1);
    for (int g = 0; g < groups; ++g) {
      const int base = g * per_group + first_block[i];
      for (int p = 0; p < n; ++p)
        b.slot_mappings[g].push_back((base + p / kBlock) * kBlock + p % kBlock);
      AttentionMeta& a = b.attn[g];
      if (a.query_start_loc.empty()) a.query_start_loc.push_back(0);
      a.query_start_loc.push_back(static_cast<int32_t>(b.token_ids.size()));
      a.seq_lens.push_back(n);
      const int blocks = (n + kBlock - 1) / kBlock;
      for (int k = 0; k < widest; ++k) a.block_tables.push_back(base + std::min(k, blocks - 1));
      a.max_blocks_per_seq = widest;
    }
  }
  return b;
}

}  // namespace

std::vector<float> LastTokenPooling::embed(const std::vector<std::vector<int32_t>>& seqs) const {
  if (seqs.empty()) return {};
  for (const auto& ids : seqs)
    VLLM_CHECK(!ids.empty() && static_cast<int>(ids.size()) <= max_model_len_, "sequence of ",
               ids.size(), " tokens to pool");
  const int groups = static_cast<int>(model_.kv_cache_groups().size());
  int num_blocks = 0;
  const ForwardBatch batch = pack(seqs, groups, num_blocks);
  KvCache cache = model_.allocate_kv_cache(num_blocks, kBlock);
  const Tensor h = model_.hidden_states(batch, cache);
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}

std::string LastTokenPooling::describe() const {
  return model_.config().architecture + " (embedding, last-token pooling, normalized)";
}

}  // namespace vllm
