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

// Everything compute() allocates for a decode step of the largest bucket (the arena hands out
// fresh pieces only), plus split-KV partials of every layer and room for 256-byte alignment.
// Split-KV keeps fewer than 4 x multiprocessors partial rows of head_dim + 2 floats per layer
// (runtime/cuda/attention.cu); 4,096 rows covers GPUs of up to 1,024 multiprocessors.
int64_t DecoderModel::graph_arena_bytes() const {
  if (enforce_eager_ || !backend_for(device_).supports_graphs()) return 0;
  const ModelConfig& c = config_;
  const int64_t tokens = kMaxGraphTokens;
  const int64_t partials = int64_t(c.num_layers) * 4096 * 4 * (c.head_dim + 2);
  return (activation_bytes(tokens, tokens, /*pieces_reused=*/false) + partials) * 5 / 4 +
         (int64_t(16) << 20);
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
  if (enforce_eager_ || !be.supports_graphs() || T > kMaxGraphTokens || a.num_seqs() != T ||
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
    // The arena is sized once for the largest bucket: it cannot move under live graphs.
    const auto arena = static_cast<size_t>(graph_arena_bytes());
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
