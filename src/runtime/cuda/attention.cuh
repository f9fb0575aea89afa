// What the paged-attention kernels share: their arguments, and the tensor-core kernel's
// entry point (flash_attention.cu) for attention.cu's dispatch.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace vllm::cuda {

// Caches are [num_blocks, block_size, num_kv_heads, head_dim] of element type C; for MLA the
// value is the leading v_dim lanes of the key row (one KV head, v_cache == k_cache).
template <typename C>
struct AttnArgs {
  const float* q;
  int64_t q_st, q_sh;  // strides in floats: token, head
  float* out;
  int64_t o_st, o_sh;
  const C* k_cache;
  const C* v_cache;
  const int32_t* query_start_loc;  // [num_seqs + 1]
  const int32_t* seq_lens;         // [num_seqs]
  const int32_t* block_tables;     // [num_seqs, max_blocks]
  int num_seqs, max_blocks, block_size;
  int num_q_heads, num_kv_heads, head_dim;
  int v_dim;               // values' width: head_dim, or MLA's latent c
  int64_t k_slot, v_slot;  // cache elements from one slot (token) to the next
  float scale;
  int window;
  int skip_queries_from;  // > 0: sequences with this many query rows or more are left alone
  float* part_o;   // [T, Hq, splits, v_dim] unnormalised, when split
  float* part_ml;  // [T, Hq, splits, 2] running max and sum
};

// What query token t of a step sees, for the kernels that take one token per block: its
// sequence, its q_len and position, and the keys [begin, end) of split `split` of `splits`
// (equal shares of its visible range: causal, and windowed when a.window > 0).
struct TokenKeys {
  int seq, q_len, pos, begin, end;
};
template <typename C>
__device__ __forceinline__ TokenKeys token_keys(const AttnArgs<C>& a, int t, int split,
                                                int splits) {
  TokenKeys k;
  int b = 0, hi = a.num_seqs - 1;  // the sequence owning token t
  while (b < hi) {
    const int mid = (b + hi + 1) / 2;
    if (a.query_start_loc[mid] <= t) b = mid; else hi = mid - 1;
  }
  k.seq = b;
  k.q_len = a.query_start_loc[b + 1] - a.query_start_loc[b];
  k.pos = a.seq_lens[b] - k.q_len + (t - a.query_start_loc[b]);
  const int first = a.window > 0 ? max(0, k.pos - a.window + 1) : 0;
  const int chunk = (k.pos - first + 1 + splits - 1) / splits;
  k.begin = first + split * chunk;
  k.end = min(k.pos + 1, k.begin + chunk);
  return k;
}

// True when the tensor-core kernel takes this problem: C is half, bfloat16 or e4m3, head_dim is
// 64 or 128, and q/out rows are aligned for vector access.
template <typename C>
bool flash_attention_supports(const AttnArgs<C>& a);
// Its grid for `tokens` query tokens of `seqs` sequences: blocks per KV head (some return at
// once), and keys per tile.
template <typename C>
int flash_attention_slots(const AttnArgs<C>& a, int tokens, int seqs);
int flash_attention_key_tile();
// Its blocks that one multiprocessor holds at once (by shared memory, registers and threads).
template <typename C>
int flash_attention_blocks_per_sm(const AttnArgs<C>& a);
// Launches it over `tokens` query tokens on `stream` (supports(a) must hold). splits > 1
// leaves partial results in a.part_o / a.part_ml for the merge kernel.
template <typename C>
void launch_flash_attention(const AttnArgs<C>& a, int tokens, int splits, cudaStream_t stream);

// The MLA kernel (mla_attention.cu): true when the cache is MLA's latent rows (one KV head,
// the value the key's leading lanes, v_dim <= 512) and the key row fits shared memory.
template <typename C>
bool mla_attention_supports(const AttnArgs<C>& a);
int mla_attention_heads_per_block();
template <typename C>
void launch_mla_attention(const AttnArgs<C>& a, int tokens, int splits, cudaStream_t stream);
// Its tensor-core form (mla_decode.cu), for 16-bit caches at DeepSeek's widths (keys of 576
// lanes, values of 512), with the same grid: 16 heads of one token per block.
template <typename C>
bool mla_decode_supports(const AttnArgs<C>& a);
template <typename C>
void launch_mla_decode(const AttnArgs<C>& a, int tokens, int splits, cudaStream_t stream);

}  // namespace vllm::cuda
