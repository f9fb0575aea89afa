// Tensor parallelism (Megatron's split, as vLLM's): which slice of each weight a rank holds and
// the config its shard of the decoder sees. Column-parallel projections keep the rows of the
// rank's heads or MLP columns, row-parallel ones (o, down) the matching input columns, and
// their partial outputs are summed across ranks (Communicator::all_reduce_sum).
#pragma once
#include <memory>

#include "model/config.h"
#include "model/weights.h"

namespace vllm {

struct TpRank {
  int rank = 0;
  int size = 1;
};

// The config of `tp`'s shard: num_heads / size attention heads, num_kv_heads / size KV heads
// (one, replicated, when there are fewer KV heads than ranks), intermediate_size / size MLP
// columns (each expert's too). Throws an Error naming the config field that does not split.
ModelConfig shard_config(const ModelConfig& full, TpRank tp);

// `full`'s tensors as `tp`'s shard loads them (`full` and `config` must outlive the result):
//   rows of the rank's heads:    q_proj, q_b_proj, kv_b_proj (weights and biases); k_proj and
//                                v_proj by KV head;
//   rows of the rank's columns:  every gate_proj and up_proj (dense, experts, shared experts);
//   input columns:               o_proj (by head), every down_proj;
//   whole:                       everything else (embeddings, norms, routers, MLA's q_a/kv_a).
// The LM head is split by the decoder itself (vocab-parallel). A block-quantized tensor splits
// only along whole blocks; anything else is an Error naming the tensor.
std::unique_ptr<WeightSource> make_shard_source(const WeightSource& full,
                                                const ModelConfig& config, TpRank tp);

// Rank r's share [begin, begin + length) of n units split as evenly as possible (the first
// n % size ranks take one more).
struct Share {
  int64_t begin = 0, length = 0;
};
Share share_of(int64_t n, TpRank tp);

}  // namespace vllm
