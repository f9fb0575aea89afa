// Multi-head latent attention (MLA) over the paged cache on CUDA, for prefill, chunked prefill
// and decode steps alike. The cache holds one latent row per token, [c | k_pe] (one KV head);
// each head's query arrives already in latent space, [W_UK^T q_nope | rope(q_pe)], so the key
// is the whole row and the value its leading Dv lanes, c. As in FlashMLA, the heads of a token
// share every tile of rows a block loads: a block serves kHeads heads of one query token, so
// the cache is read once per kHeads heads instead of once per head. The products run on the
// CUDA cores in f32 (tensor cores are the next step); long contexts are split over blocks and
// merged by attention.cu's merge kernel.
#include <algorithm>

#include "runtime/cuda/attention.cuh"
#include "runtime/cuda/common.cuh"
#include "util/check.h"

namespace vllm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kHeads = 16;                   // query heads per block
constexpr int kKeys = kThreads / kHeads;     // keys per tile: one score per thread
constexpr int kLanes = kThreads / kHeads;    // threads sharing one head's output row
constexpr int kMaxValue = 512;               // Dv bound: kMaxValue / kLanes outputs per thread
constexpr int kOut = kMaxValue / kLanes;

// Shared memory: the block's queries [kHeads][Dk + 1] and one tile of rows [kKeys][Dk + 1]
// (the extra column keeps the score loop free of bank conflicts), scores [kHeads][kKeys],
// and per head the running max, sum and this tile's correction.
size_t smem_bytes(int dk) {
  return sizeof(float) * (size_t(kHeads + kKeys) * (dk + 1) + kHeads * kKeys + 3 * kHeads);
}

template <typename C>
__global__ void __launch_bounds__(kThreads) mla_attention_kernel(const AttnArgs<C> a) {
  pdl_begin();
  extern __shared__ float smem[];
  const int dk = a.head_dim, dv = a.v_dim, pitch = dk + 1;
  float* qs = smem;                       // [kHeads][pitch]
  float* ks = qs + kHeads * pitch;        // [kKeys][pitch]
  float* ss = ks + kKeys * pitch;         // [kHeads][kKeys]
  float* sm = ss + kHeads * kKeys;        // [kHeads] running max
  float* sl = sm + kHeads;                // [kHeads] running sum
  float* sc = sl + kHeads;                // [kHeads] this tile's rescale

  const int t = blockIdx.x, h0 = blockIdx.y * kHeads, split = blockIdx.z, splits = gridDim.z;
  const int tid = threadIdx.x;
  const TokenKeys tk = token_keys(a, t, split, splits);
  if (a.skip_queries_from > 0 && tk.q_len >= a.skip_queries_from) return;
  const int b = tk.seq, begin = tk.begin, end = tk.end;
  const int heads = min(kHeads, a.num_q_heads - h0);
  const int32_t* table = a.block_tables + int64_t(b) * a.max_blocks;

  // Unrolled so that each thread's loads are in flight together: one at a time, the query
  // and each tile cost a memory latency per element a thread loads.
#pragma unroll 8
  for (int i = tid; i < kHeads * dk; i += kThreads) {
    const int h = i / dk, d = i % dk;
    qs[h * pitch + d] = h < heads ? __ldg(a.q + t * a.q_st + (h0 + h) * a.q_sh + d) * a.scale
                                  : 0.0f;
  }
  // Tiles move in 16-byte pieces where the rows allow it.
  constexpr int kVec = 16 / sizeof(C);
  const bool vec = dk % kVec == 0 && a.k_slot % kVec == 0 &&
                   reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0;
  const int pieces = dk / kVec;
  if (tid < kHeads) sm[tid] = -INFINITY, sl[tid] = 0.0f;

  // Score phase: thread (sh, sj) scores head sh against key sj of the tile. Output phase:
  // thread (oh, ol) owns lanes ol, ol + kLanes, ... of head oh's output row.
  const int sh = tid / kKeys, sj = tid % kKeys;
  const int oh = tid / kLanes, ol = tid % kLanes;
  float acc[kOut];
#pragma unroll
  for (int i = 0; i < kOut; ++i) acc[i] = 0.0f;

  for (int j0 = begin; j0 < end; j0 += kKeys) {
    __syncthreads();  // the previous tile's rows and scores are consumed
    if (vec) {
#pragma unroll 4
      for (int i = tid; i < kKeys * pieces; i += kThreads) {
        const int j = i / pieces, d = (i % pieces) * kVec, key = j0 + j;
        uint4 u = make_uint4(0, 0, 0, 0);  // zeros: a key past the end
        if (key < end) {
          const int64_t slot =
              int64_t(__ldg(table + key / a.block_size)) * a.block_size + key % a.block_size;
          u = __ldg(reinterpret_cast<const uint4*>(a.k_cache + slot * a.k_slot + d));
        }
        const C* e = reinterpret_cast<const C*>(&u);
#pragma unroll
        for (int x = 0; x < kVec; ++x) ks[j * pitch + d + x] = to_float(e[x]);
      }
    } else {
#pragma unroll 4
      for (int i = tid; i < kKeys * dk; i += kThreads) {
        const int j = i / dk, d = i % dk, key = j0 + j;
        float v = 0.0f;
        if (key < end) {
          const int64_t slot =
              int64_t(__ldg(table + key / a.block_size)) * a.block_size + key % a.block_size;
          v = to_float(a.k_cache[slot * a.k_slot + d]);
        }
        ks[j * pitch + d] = v;
      }
    }
    __syncthreads();
    {
      const float* qr = qs + sh * pitch;
      const float* kr = ks + sj * pitch;
      float s = 0.0f;
      for (int d = 0; d < dk; ++d) s += qr[d] * kr[d];
      ss[sh * kKeys + sj] = j0 + sj < end ? s : -INFINITY;
    }
    __syncthreads();
    if (tid < kHeads) {  // online softmax, one thread per head
      float* row = ss + tid * kKeys;
      float mx = sm[tid];
      for (int j = 0; j < kKeys; ++j) mx = fmaxf(mx, row[j]);
      const float corr = mx == -INFINITY ? 1.0f : expf(sm[tid] - mx);
      float sum = 0.0f;
      for (int j = 0; j < kKeys; ++j) {
        const float p = row[j] == -INFINITY ? 0.0f : expf(row[j] - mx);
        row[j] = p;
        sum += p;
      }
      sm[tid] = mx;
      sl[tid] = sl[tid] * corr + sum;
      sc[tid] = corr;
    }
    __syncthreads();
    const float corr = sc[oh];
    const float* p = ss + oh * kKeys;
#pragma unroll
    for (int i = 0; i < kOut; ++i) acc[i] *= corr;
    for (int j = 0; j < kKeys; ++j) {
      const float pj = p[j];
      const float* vr = ks + j * pitch;
#pragma unroll
      for (int i = 0; i < kOut; ++i) {
        const int d = ol + kLanes * i;
        if (d < dv) acc[i] += pj * vr[d];
      }
    }
  }
  __syncthreads();
  if (oh >= heads) return;
  const int h = h0 + oh;
  if (splits == 1) {
    const float inv = sl[oh] > 0.0f ? 1.0f / sl[oh] : 0.0f;
    float* op = a.out + t * a.o_st + h * a.o_sh;
#pragma unroll
    for (int i = 0; i < kOut; ++i)
      if (ol + kLanes * i < dv) op[ol + kLanes * i] = acc[i] * inv;
    return;
  }
  const int64_t part = (int64_t(t) * a.num_q_heads + h) * splits + split;
#pragma unroll
  for (int i = 0; i < kOut; ++i)
    if (ol + kLanes * i < dv) a.part_o[part * dv + ol + kLanes * i] = acc[i];
  if (ol == 0) a.part_ml[part * 2] = sm[oh], a.part_ml[part * 2 + 1] = sl[oh];
}

}  // namespace

template <typename C>
bool mla_attention_supports(const AttnArgs<C>& a) {
  return a.num_kv_heads == 1 && a.v_dim <= kMaxValue && a.v_dim <= a.head_dim &&
         a.v_cache == a.k_cache && a.v_slot == a.k_slot && smem_bytes(a.head_dim) <= 200 * 1024;
}

int mla_attention_heads_per_block() { return kHeads; }

template <typename C>
void launch_mla_attention(const AttnArgs<C>& a, int tokens, int splits, cudaStream_t stream) {
  const size_t smem = smem_bytes(a.head_dim);
  VLLM_CUDA_CHECK(cudaFuncSetAttribute(mla_attention_kernel<C>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>(tokens),
                  static_cast<unsigned>((a.num_q_heads + kHeads - 1) / kHeads),
                  static_cast<unsigned>(splits));
  launch(mla_attention_kernel<C>, grid, kThreads, smem, stream, a);
}

#define VLLM_MLA_INSTANTIATE(C)                                                           \
  template bool mla_attention_supports<C>(const AttnArgs<C>&);                            \
  template void launch_mla_attention<C>(const AttnArgs<C>&, int, int, cudaStream_t);
VLLM_MLA_INSTANTIATE(float)
VLLM_MLA_INSTANTIATE(__half)
VLLM_MLA_INSTANTIATE(__nv_bfloat16)
#undef VLLM_MLA_INSTANTIATE

}  // namespace vllm::cuda
