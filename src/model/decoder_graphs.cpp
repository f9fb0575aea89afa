// CUDA graphs for decode steps. A step of T single-token sequences is padded to a bucket of
// T (1, 2, 4, ... 256) and of the block-table width (16, 32, ...), and replays the graph of
// that bucket, captured on first use and kept in the KvCache it writes into. The graph reads its inputs from a persistent
// buffer and keeps its activations in the backend's step arena, so its addresses hold.
#include <algorithm>
#include <numeric>

#include "model/decoder.h"
#include "runtime/backend.h"
#include "util/check.h"

namespace vllm {
namespace {

constexpr int kMaxGraphTokens = 256;

int bucket(int n, int smallest) {
  int b = smallest;
  while (b < n) b *= 2;
  return b;
}

}  // namespace

// The decode step of every bucket, eager, with block tables as wide as max_model_len needs (the
// widest captures split the keys the most): each piece the arena would hand out, counted by the
// backend. Padding sequences write no KV (slot -1) and read one token of block 0.
int64_t DecoderModel::measure_graph_arena(int max_model_len, int block_size,
                                          KvCache& cache) const {
  Backend& be = backend_for(device_);
  if (enforce_eager_ || !be.supports_graphs() || max_graph_tokens() == 0)
    return graph_arena_bytes_ = 0;
  const int width = bucket((max_model_len + block_size - 1) / block_size, 16);
  int64_t most = 0;
  for (int tokens = 1; tokens <= max_graph_tokens(); tokens *= 2) {
    ForwardBatch p;
    p.token_ids.assign(tokens, 0);
    p.positions.assign(tokens, 0);
    p.logits_indices.resize(tokens);
    std::iota(p.logits_indices.begin(), p.logits_indices.end(), 0);
    for (size_t g = 0; g < groups_.size(); ++g) {
      p.slot_mappings.emplace_back(tokens, -1);
      AttentionMeta& a = p.attn.emplace_back();
      a.query_start_loc.resize(tokens + 1);
      std::iota(a.query_start_loc.begin(), a.query_start_loc.end(), 0);
      a.seq_lens.assign(tokens, 1);
      a.max_blocks_per_seq = width;
      a.block_tables.assign(size_t(tokens) * width, 0);
      a.max_seq_len_bound = width * block_size;
    }
    std::vector<AttentionMeta> meta;
    const StepInputs in = upload_inputs(p, meta, Tensor());
    be.begin_profile();
    compute(in, cache);
    most = std::max(most, be.end_profile().arena_bytes);
  }
  graph_arena_width_ = width;
  return graph_arena_bytes_ = most + 256;  // the arena's own start may need aligning
}

// A routing observer (tests) copies each mixture-of-experts layer's margins to the host, which
// a graph cannot hold, and so do collectives through the host (ranks sharing a GPU).
int DecoderModel::max_graph_tokens() const {
  if (comm_ && !comm_->capturable()) return 0;
  return has_moe() && routing_observer_ ? 0 : kMaxGraphTokens;
}

struct DecoderModel::Graph {
  Tensor inputs;  // persistent device buffer the graph reads its step inputs from
  std::vector<AttentionMeta> meta;  // per KV cache group
  std::shared_ptr<void> exec;
  Tensor logits;  // [bucket, vocab] in the step arena, rewritten by each replay
};

std::optional<Tensor> DecoderModel::forward_graph(const ForwardBatch& batch,
                                                  KvCache& cache) const {
  Backend& be = backend_for(device_);
  const AttentionMeta& a = batch.attn[0];
  const int T = batch.num_tokens();
  if (enforce_eager_ || !be.supports_graphs() || T > max_graph_tokens() ||
      a.num_seqs() != T ||
      static_cast<int>(batch.logits_indices.size()) != T)
    return std::nullopt;
  for (int i = 0; i < T; ++i)
    if (a.query_start_loc[i] != i || batch.logits_indices[i] != i) return std::nullopt;

  // The padded step: extra sequences of one token write no KV (slot -1) and are not read.
  // Every group's tables are padded to one width, the bucket of the widest.
  const int tokens = bucket(T, 1);
  int widest = 0;
  for (const AttentionMeta& g : batch.attn) widest = std::max(widest, g.max_blocks_per_seq);
  const int width = bucket(widest, 16);
  if (graph_arena_bytes_ < 0)
    measure_graph_arena(config_.max_position_embeddings, cache.block_size, cache);
  if (width > graph_arena_width_) return std::nullopt;  // wider than measured: eager
  ForwardBatch p;
  p.token_ids = batch.token_ids;
  p.token_ids.resize(tokens, 0);
  p.positions = batch.positions;
  p.positions.resize(tokens, 0);
  p.logits_indices.resize(tokens);
  std::iota(p.logits_indices.begin(), p.logits_indices.end(), 0);
  for (int g = 0; g < batch.num_groups(); ++g) {
    const AttentionMeta& ga = batch.attn[g];
    p.slot_mappings.push_back(batch.slot_mappings[g]);
    p.slot_mappings.back().resize(tokens, -1);
    AttentionMeta& pa = p.attn.emplace_back();
    pa.query_start_loc.resize(tokens + 1);
    std::iota(pa.query_start_loc.begin(), pa.query_start_loc.end(), 0);
    pa.seq_lens = ga.seq_lens;
    pa.seq_lens.resize(tokens, 1);
    pa.max_blocks_per_seq = width;
    pa.block_tables.assign(size_t(tokens) * width, 0);
    for (int s = 0; s < T; ++s)
      std::copy_n(ga.block_tables.begin() + size_t(s) * ga.max_blocks_per_seq,
                  ga.max_blocks_per_seq, pa.block_tables.begin() + size_t(s) * width);
    pa.max_seq_len_bound = width * cache.block_size;
  }

  std::shared_ptr<void>& slot = cache.graphs[{tokens, width}];
  auto g = std::static_pointer_cast<Graph>(slot);
  if (!g) {
    auto fresh = std::make_shared<Graph>();
    size_t packed = p.token_ids.size() * 3;  // ids, positions, logits rows
    for (int g = 0; g < p.num_groups(); ++g)
      packed += p.slot_mappings[g].size() + p.attn[g].query_start_loc.size() +
                p.attn[g].seq_lens.size() + p.attn[g].block_tables.size();
    fresh->inputs = Tensor::empty({int64_t(packed)}, DType::I32, device_);
    const StepInputs in = upload_inputs(p, fresh->meta, fresh->inputs);
    // The arena is sized once, for the largest need of any bucket: it cannot move under live
    // graphs.
    const auto arena = static_cast<size_t>(graph_arena_bytes_);
    be.begin_arena(arena);  // an eager run first: cuBLASLt plans, module loading
    compute(in, cache);
    be.end_arena();
    be.synchronize();
    be.begin_arena(arena);
    be.begin_capture();
    try {
      fresh->logits = compute(in, cache);
    } catch (...) {
      be.end_capture();
      be.end_arena();
      throw;
    }
    fresh->exec = be.end_capture();
    be.end_arena();
    slot = fresh;
    g = std::move(fresh);
  } else {
    upload_inputs(p, g->meta, g->inputs);
  }
  be.replay(g->exec);
  return g->logits.narrow(0, T);
}

}  // namespace vllm
